"""Compare cleave's type inference with onnx's, tensor by tensor.

    python3 scripts/oracles/infer_oracle.py CLEAVE_BIN MODEL_OR_FOLDER... [--json OUT] [--show N]

Each model is copied with its value_info and graph-output types removed (graph inputs keep
theirs), so that both sides infer from the same facts. onnx runs
`onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)`; cleave runs
`cleave inspect --json --types`. For every tensor of the top-level graph that onnx types:

- contradiction: both know the element type, the rank or a dim as a number, and they differ;
- less: onnx knows the element type, the rank, or a dim as a number, and cleave does not.

Models that onnx itself cannot infer (it raises) are skipped and counted. Exits 1 on any
contradiction, or on any tensor where cleave misses an element type or a rank that onnx
knows; unknown dims are reported, not failed.
"""
import argparse
import collections
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import onnx
from onnx import shape_inference

ELEM = {
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
    8: "string", 9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64",
    14: "complex64", 15: "complex128", 16: "bfloat16", 17: "float8e4m3fn", 18: "float8e4m3fnuz",
    19: "float8e5m2", 20: "float8e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4e2m1",
}


def models(paths):
    for p in map(pathlib.Path, paths):
        if p.is_dir():
            yield from sorted(p.rglob("*.onnx"))
        else:
            yield p


def onnx_types(m):
    """name -> (elem or None, dims or None); dims: int, str (symbol) or None."""
    out = {}
    g = m.graph
    for vi in list(g.value_info) + list(g.output) + list(g.input):
        t = vi.type
        if not t.HasField("tensor_type"):
            continue
        tt = t.tensor_type
        elem = ELEM.get(tt.elem_type) if tt.elem_type else None
        dims = None
        if tt.HasField("shape"):
            dims = []
            for d in tt.shape.dim:
                if d.HasField("dim_value") and d.dim_value >= 0:
                    dims.append(d.dim_value)
                elif d.HasField("dim_param"):
                    dims.append(d.dim_param)
                else:
                    dims.append(None)
        out[vi.name] = (elem, dims)
    return out


def strip(m):
    del m.graph.value_info[:]
    for o in m.graph.output:
        o.type.tensor_type.ClearField("elem_type")
        o.type.tensor_type.ClearField("shape")


def compare(name, mine, theirs, stats, examples, op_of):
    elem, dims = theirs
    my = mine.get(name)
    my_elem, my_dims = (my["dtype"], my["shape"]) if my else (None, None)
    op = op_of.get(name, "?")
    stats["tensors"] += 1
    if elem:
        if my_elem is None:
            stats["less_elem"] += 1
            examples["less_elem"].append((op, name, elem, my_elem))
        elif my_elem != elem:
            stats["contradictions"] += 1
            examples["contradictions"].append((op, name, f"elem {elem}", f"elem {my_elem}"))
    if dims is None:
        return
    if my_dims is None:
        stats["less_rank"] += 1
        examples["less_rank"].append((op, name, dims, my_dims))
        return
    if len(my_dims) != len(dims):
        stats["contradictions"] += 1
        examples["contradictions"].append((op, name, dims, my_dims))
        return
    for a, b in zip(dims, my_dims):
        if isinstance(a, int) and isinstance(b, int) and a != b:
            stats["contradictions"] += 1
            examples["contradictions"].append((op, name, dims, my_dims))
            return
    stats["dims"] += len(dims)
    less = sum(1 for a, b in zip(dims, my_dims) if isinstance(a, int) and not isinstance(b, int))
    if less:
        stats["less_dims"] += less
        examples["less_dims"].append((op, name, dims, my_dims))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cleave")
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--json", help="write the counts and examples here")
    ap.add_argument("--show", type=int, default=10, help="examples printed per kind")
    args = ap.parse_args()
    stats = collections.Counter()
    examples = collections.defaultdict(list)
    less_by_op = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        for path in models(args.paths):
            try:
                m = onnx.load(str(path))
            except Exception:
                stats["unreadable"] += 1
                continue
            strip(m)
            try:
                inferred = shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)
            except Exception:
                stats["onnx_failed"] += 1
                continue
            local = pathlib.Path(tmp) / "m.onnx"
            onnx.save(m, str(local))
            # External data stays where the source keeps it.
            if any(t.data_location == onnx.TensorProto.EXTERNAL for t in m.graph.initializer):
                local = pathlib.Path(path).parent / f".oracle-{os.getpid()}.onnx"
                onnx.save(m, str(local))
            r = subprocess.run([args.cleave, "inspect", "--json", "--types", "--quiet", str(local)],
                               capture_output=True, text=True)
            if local.parent != pathlib.Path(tmp):
                local.unlink()
            if r.returncode != 0:
                stats["cleave_refused"] += 1
                examples["cleave_refused"].append((str(path), r.stderr.strip()[:200]))
                continue
            stats["models"] += 1
            mine = {t["name"]: t for t in json.loads(r.stdout)["types"]}
            op_of = {o: n.op_type for n in m.graph.node for o in n.output}
            before = {k: stats[k] for k in ("less_elem", "less_rank", "contradictions")}
            for name, theirs in onnx_types(inferred).items():
                compare(name, mine, theirs, stats, examples, op_of)
            for kind in ("less_elem", "less_rank"):
                for op, *_ in examples[kind][len(examples[kind]) - (stats[kind] - before[kind]):]:
                    less_by_op[op] += 1
            if stats["contradictions"] > before["contradictions"]:
                examples["contradicted_in"].append(str(path))
    print(f"models {stats['models']} (onnx could not infer {stats['onnx_failed']}, "
          f"cleave refused {stats['cleave_refused']}, unreadable {stats['unreadable']})")
    print(f"tensors {stats['tensors']}: contradictions {stats['contradictions']}, "
          f"cleave lacks elem {stats['less_elem']}, rank {stats['less_rank']}, "
          f"dims {stats['less_dims']} of {stats['dims']}")
    if less_by_op:
        print("missing elem/rank by op: " + ", ".join(f"{k} {v}" for k, v in less_by_op.most_common()))
    for kind in ("contradictions", "less_elem", "less_rank", "less_dims", "cleave_refused"):
        for ex in examples[kind][: args.show]:
            print(f"  {kind}: {ex}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            {"stats": stats, "less_by_op": less_by_op,
             "examples": {k: v[:100] for k, v in examples.items()}}, indent=1, default=str))
    sys.exit(1 if stats["contradictions"] or stats["less_elem"] or stats["less_rank"] else 0)


if __name__ == "__main__":
    main()
