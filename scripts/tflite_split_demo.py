"""Test-only: split a .tflite model into contiguous runs of its operators, written as standalone
models plus a ONE-style .conn.json, so check_tflite_parts.py can be tried on real partitions
before cleave writes TFLite parts itself. Not a partitioner: no device rules, no cost.

    python3 scripts/tflite_split_demo.py MODEL OUTDIR --parts N [--circle I,J] [--wrong KIND]
    python3 scripts/tflite_split_demo.py MODEL OUTDIR --cuts 10,40 [...]
    python3 scripts/tflite_split_demo.py MODEL OUTDIR --hoist DEQUANTIZE --cuts 120 --circle 2

--hoist puts every operator of those types that reads only constants into a first part of its
own, and splits the remaining operators by --parts/--cuts (indices into those remaining ones):
onert 0.1.0 cannot run DEQUANTIZE of float16 weights, so this leaves it the rest of a detector.

A model's operators are stored in execution order, so each contiguous run is runnable once the
runs before it have: part k's inputs are the non-constant tensors its operators read that an
earlier part (or the source's inputs) produced; its outputs are the tensors it produces that a
later part reads or that are source outputs. Each part keeps only the tensors and buffers it
uses. Parts are named ONE's way: stem.00001_cpu.tflite; with --circle I,J (1-based) those parts
are written as stem.0000I_onert.circle, the file identifier "CIR0" as circle files carry it.

--reverse lists the parts last to first in the connection file (a checker must find the order).
--wrong makes a deliberately broken partition, to see the checker refuse it, in part
--wrong-part K (default 1):
  rename-output   the part's file names its first output differently from the connection file
  swap-weights    the part's largest float constant is perturbed (the part computes wrong values)
  miswire         two inputs of one dtype and shape swap names in the part's file (each
                  consumer reads the other's data; the names still match the connection file)
  requant         the part's file doubles its first output's quantization scale
  drop-output     the connection file leaves out the part's last output
  cycle           the connection file makes the part also need the last part's first output
"""
import argparse
import copy
import json
import pathlib
import sys

import numpy as np
from ai_edge_litert.tools import flatbuffer_utils as fu

import tflite_common as tc


def part_model(model, ops, inputs, outputs):
    """A standalone model of subgraph 0's operators `ops` with the given input/output tensor
    indices, keeping only the tensors and buffers they use."""
    m = copy.deepcopy(model)
    g = m.subgraphs[0]
    keep_ops = [g.operators[i] for i in ops]
    used = []
    for t in list(inputs) + [t for op in keep_ops for t in list(op.inputs) + list(op.outputs)] + list(outputs):
        if t >= 0 and t not in used:
            used.append(t)
    new_of = {old: new for new, old in enumerate(used)}
    # Buffer 0 is the empty sentinel; metadata buffers (e.g. min_runtime_version) stay.
    buffers = [m.buffers[0]]
    buf_of = {0: 0}

    def buf(b):
        if b not in buf_of:
            buf_of[b] = len(buffers)
            buffers.append(m.buffers[b])
        return buf_of[b]
    tensors = []
    for old in used:
        t = g.tensors[old]
        t.buffer = buf(t.buffer) if t.buffer else 0
        tensors.append(t)
    for md in m.metadata or []:
        md.buffer = buf(md.buffer)
    for op in keep_ops:
        op.inputs = [new_of[t] if t >= 0 else t for t in op.inputs]
        op.outputs = [new_of[t] for t in op.outputs]
        if op.intermediates is not None and len(op.intermediates):
            sys.exit("error: operators with intermediates (LSTM) are not handled by this demo")
    g.tensors, g.operators = tensors, keep_ops
    g.inputs = [new_of[t] for t in inputs]
    g.outputs = [new_of[t] for t in outputs]
    m.subgraphs = [g]
    m.buffers = buffers
    m.signatureDefs = None
    return m


def split(model, fb, groups):
    """[(op indices, input tensor indices, output tensor indices)] for the given groups of
    operator indices (each in execution order, the groups in an order they can run in)."""
    g = model.subgraphs[0]
    part_of = {}
    for k, ops in enumerate(groups):
        for i in ops:
            for t in g.operators[i].outputs:
                part_of[t] = k
    readers = {}
    for k, ops in enumerate(groups):
        for i in ops:
            for t in g.operators[i].inputs:
                readers.setdefault(t, set()).add(k)
    graph_out = list(g.outputs)
    result = []
    for k, ops in enumerate(groups):
        reads = []
        for i in ops:
            for t in g.operators[i].inputs:
                if t >= 0 and not fb.is_constant(t) and part_of.get(t, -1) != k and t not in reads:
                    if part_of.get(t, -1) > k:
                        sys.exit(f"error: part {k + 1} reads {g.tensors[t].name} from a later part")
                    reads.append(t)
        made = sorted({t for i in ops for t in g.operators[i].outputs})
        outs = [t for t in made if readers.get(t, set()) - {k} or t in graph_out]
        result.append((ops, reads, outs))
    return result


def groups_of(model, fb, hoist, parts, cuts):
    """Operator groups: with hoist, every operator of those types that reads only constants
    (DEQUANTIZE of float16 weights) first, on its own; the rest cut into contiguous runs."""
    g = model.subgraphs[0]
    first, rest = [], []
    for i, op in enumerate(g.operators):
        name = fu.opcode_to_name(model, op.opcodeIndex)
        if name in hoist and all(t < 0 or fb.is_constant(t) for t in op.inputs):
            first.append(i)
        else:
            rest.append(i)
    if hoist and not first:
        sys.exit(f"error: no {','.join(sorted(hoist))} operator reads only constants")
    n = len(rest)
    if parts:
        if not 1 <= parts <= n:
            sys.exit(f"error: --parts {parts}: {n} operators to split")
        cuts = [round(n * k / parts) for k in range(1, parts)]
    bounds = [0] + cuts + [n]
    if bounds != sorted(set(bounds)):
        sys.exit(f"error: cuts {cuts} must be increasing, inside 1..{n - 1}")
    return ([first] if first else []) + [rest[a:b] for a, b in zip(bounds, bounds[1:])]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=pathlib.Path)
    ap.add_argument("outdir", type=pathlib.Path)
    how = ap.add_mutually_exclusive_group(required=True)
    how.add_argument("--parts", type=int, help="this many parts of (nearly) equal op counts")
    how.add_argument("--cuts", help="operator indices where a new part starts, comma-separated")
    ap.add_argument("--hoist", default="", help="operator types (DEQUANTIZE,...) to run first, in a part of their own")
    ap.add_argument("--circle", default="", help="1-based parts to write as .circle")
    ap.add_argument("--reverse", action="store_true", help="list the parts last to first")
    ap.add_argument("--wrong", choices=["rename-output", "swap-weights", "miswire", "requant", "drop-output", "cycle"])
    ap.add_argument("--wrong-part", type=int, default=1, help="the 1-based part --wrong breaks (default 1)")
    args = ap.parse_args()

    model = fu.read_model(args.model)
    if len(model.subgraphs) != 1:
        sys.exit(f"error: {args.model} has {len(model.subgraphs)} subgraphs; this demo splits one")
    fb = tc.Flatbuffer(args.model)
    cuts = [int(c) for c in args.cuts.split(",")] if args.cuts else []
    hoist = {h for h in args.hoist.split(",") if h}
    runs = split(model, fb, groups_of(model, fb, hoist, args.parts, cuts))
    circle = {int(c) for c in args.circle.split(",") if c}
    g = model.subgraphs[0]
    graph_in, graph_out = list(g.inputs), list(g.outputs)
    name = lambda t: g.tensors[t].name.decode()  # noqa: E731

    args.outdir.mkdir(parents=True, exist_ok=True)
    stem = args.model.stem
    src = args.outdir / args.model.name
    src.write_bytes(args.model.read_bytes())
    conn = {"source": {"file": src.name, "inputs": [name(t) for t in graph_in],
                       "outputs": [name(t) for t in graph_out]}, "parts": []}
    for k, (ops, ins, outs) in enumerate(runs, 1):
        m = part_model(model, ops, ins, outs)
        if args.wrong == "swap-weights" and k == args.wrong_part:
            # TensorType FLOAT32 = 0, FLOAT16 = 1 (weights the model DEQUANTIZEs).
            floats = {0: np.float32, 1: np.float16}
            consts = [t for t in m.subgraphs[0].tensors if t.type in floats and t.buffer
                      and m.buffers[t.buffer].data is not None]
            if not consts:
                sys.exit(f"error: part {k} has no float constant to perturb")
            big = max(consts, key=lambda t: len(m.buffers[t.buffer].data))
            dtype = floats[big.type]
            w = (np.frombuffer(bytes(m.buffers[big.buffer].data), dtype) * 1.5 + 0.1).astype(dtype)
            m.buffers[big.buffer].data = np.frombuffer(w.tobytes(), np.uint8)
        if args.wrong == "miswire" and k == args.wrong_part:
            g1 = m.subgraphs[0]
            seen = {}
            for t in g1.inputs:
                key = (g1.tensors[t].type, tuple(g1.tensors[t].shape))
                if key in seen:
                    a, b = g1.tensors[seen[key]], g1.tensors[t]
                    a.name, b.name = b.name, a.name
                    break
                seen[key] = t
            else:
                sys.exit(f"error: part {k} has no two inputs of one dtype and shape to swap")
        if args.wrong == "requant" and k == args.wrong_part:
            g1 = m.subgraphs[0]
            q = g1.tensors[g1.outputs[0]].quantization
            if q is None or q.scale is None or not len(q.scale):
                sys.exit(f"error: part {k}'s first output is not quantized")
            q.scale = [float(x) * 2 for x in q.scale]
        if args.wrong == "rename-output" and k == args.wrong_part:
            g1 = m.subgraphs[0]
            g1.tensors[g1.outputs[0]].name += b"_renamed"
        circle_part = k in circle
        file = f"{stem}.{k:05d}_{'onert.circle' if circle_part else 'cpu.tflite'}"
        data = fu.convert_object_to_bytearray(m)
        if circle_part:
            data[4:8] = tc.CIRCLE_ID
        (args.outdir / file).write_bytes(data)
        conn["parts"].append({"file": file, "inputs": [name(t) for t in ins],
                              "outputs": [name(t) for t in outs]})
    first = conn["parts"][args.wrong_part - 1]
    if args.wrong == "drop-output":
        first["outputs"].pop()
    elif args.wrong == "cycle":
        first["inputs"].append(conn["parts"][-1]["outputs"][0])
    if args.reverse:
        conn["parts"].reverse()
    out = args.outdir / f"{stem}.conn.json"
    out.write_text(json.dumps(conn, indent=2) + "\n")
    print(f"{out}: {len(runs)} parts of {[len(r[0]) for r in runs]} operators, "
          f"{sum(len(r[2]) for r in runs)} part outputs")


if __name__ == "__main__":
    main()
