"""A multi-gigabyte layered model for memory-bounded stages, and the exact optimum to check
cleave's plan against.

    python3 scripts/oracles/stage_model.py make OUT_DIR [--gb 3] [--tokens 256] [--seed 0]
    python3 scripts/oracles/stage_model.py optimum OUT_DIR/layers.json --budgets 0.9,1.1,0.8,1.2 [--cuts 0,30,67,109]

`make` writes OUT_DIR/stages.onnx: a chain of MatMul → Add (bias) → Relu layers on a
[TOKENS, WIDTH] input, widths drawn between 1024 and 8192 so layers differ in weight and work.
Weights are external data in OUT_DIR/stages.weights, a sparse file (zeros, no disk blocks),
so the model is as big as asked without writing it. OUT_DIR/layers.json lists every node in
order with the figures the oracle needs: FLOPs as cleave estimates them (MatMul 2·M·K·N, other
ops one per output element), weight bytes, and the bytes it reads and writes.

`optimum` computes, by dynamic programming over every contiguous split of that order into as
many stages as budgets (in GiB), the least bottleneck (FLOPs of the slowest stage) such that
each stage's weights plus its peak activations fit its budget. In a chain the peak while a
node runs is what it reads plus what it writes. Prints JSON: bottleneck and cuts.
"""
import argparse
import json
import pathlib
import random

import onnx
from onnx import TensorProto, helper

GIB = 1 << 30


def make(args):
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    m = args.tokens
    widths = [4096]
    total = 0
    while total < args.gb * 1e9:
        w = rng.choice([1024, 2048, 3072, 4096, 6144, 8192])
        total += widths[-1] * w * 4 + w * 4
        widths.append(w)
    nodes, inits, layers = [], [], []
    offset = 0
    x = "x"

    def external(name, dims):
        nonlocal offset
        length = 4
        for d in dims:
            length *= d
        t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims)
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", "stages.weights"), ("offset", str(offset)), ("length", str(length))):
            e = t.external_data.add()
            e.key, e.value = k, v
        offset += length
        inits.append(t)
        return length

    for i in range(len(widths) - 1):
        k, n = widths[i], widths[i + 1]
        wb = external(f"w{i}", [k, n])
        bb = external(f"b{i}", [n])
        act_in, act_out = m * k * 4, m * n * 4
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"mm{i}"], name=f"matmul{i}"))
        layers.append({"node": f"matmul{i}", "flops": 2 * m * n * k, "weights": wb, "reads": act_in, "writes": act_out})
        nodes.append(helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"ad{i}"], name=f"add{i}"))
        layers.append({"node": f"add{i}", "flops": m * n, "weights": bb, "reads": act_out, "writes": act_out})
        y = f"h{i}"
        nodes.append(helper.make_node("Relu", [f"ad{i}"], [y], name=f"relu{i}"))
        layers.append({"node": f"relu{i}", "flops": m * n, "weights": 0, "reads": act_out, "writes": act_out})
        x = y
    with open(out / "stages.weights", "wb") as f:
        f.truncate(offset)
    graph = helper.make_graph(
        nodes, "stages",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, widths[0]])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [m, widths[-1]])], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(out / "stages.onnx"))
    (out / "layers.json").write_text(json.dumps({"weights_bytes": offset, "nodes": layers}))
    print(f"{out / 'stages.onnx'}: {len(nodes)} nodes, {offset} bytes of weights ({offset / GIB:.2f} GiB)")


def optimum(args):
    nodes = json.loads(args.layers.read_text())["nodes"]
    budgets = [float(b) * GIB for b in args.budgets.split(",")]
    n, s = len(nodes), len(budgets)
    inf = float("inf")

    def stage(i, j):
        weights = sum(x["weights"] for x in nodes[i:j])
        peak = max(x["reads"] + x["writes"] for x in nodes[i:j])
        return sum(x["flops"] for x in nodes[i:j]), weights + peak

    cost = [[None] * (n + 1) for _ in range(n + 1)]
    for i in range(n):
        for j in range(i + 1, n + 1):
            cost[i][j] = stage(i, j)
    best = [[inf] * (n + 1) for _ in range(s + 1)]
    cut = [[None] * (n + 1) for _ in range(s + 1)]
    best[0][0] = 0
    for k in range(1, s + 1):
        for j in range(1, n + 1):
            for i in range(k - 1, j):
                flops, mem = cost[i][j]
                if best[k - 1][i] == inf or mem > budgets[k - 1]:
                    continue
                v = max(best[k - 1][i], flops)
                if v < best[k][j]:
                    best[k][j], cut[k][j] = v, i
    result = {"bottleneck": None}
    if best[s][n] != inf:
        cuts, j = [], n
        for k in range(s, 0, -1):
            j = cut[k][j]
            cuts.append(j)
        result = {"bottleneck": best[s][n], "cuts": cuts[::-1]}
    if args.cuts:
        # Another plan's cuts, priced here: its bottleneck and whether each stage fits.
        given = [int(c) for c in args.cuts.split(",")] + [n]
        stages = [cost[given[k]][given[k + 1]] for k in range(s)]
        result["given"] = {
            "bottleneck": max(f for f, _ in stages),
            "memory": [m for _, m in stages],
            "fits": all(m <= b for (_, m), b in zip(stages, budgets)),
        }
    print(json.dumps(result))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("make")
    a.add_argument("out", type=pathlib.Path)
    a.add_argument("--gb", type=float, default=3.0)
    a.add_argument("--tokens", type=int, default=256)
    a.add_argument("--seed", type=int, default=0)
    b = sub.add_parser("optimum")
    b.add_argument("layers", type=pathlib.Path)
    b.add_argument("--budgets", required=True)
    b.add_argument("--cuts", help="also price these stage starts, e.g. 0,30,67,109")
    args = ap.parse_args()
    make(args) if args.cmd == "make" else optimum(args)


if __name__ == "__main__":
    main()
