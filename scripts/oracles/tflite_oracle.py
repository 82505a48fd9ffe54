"""LiteRT as an independent oracle for cleave's TFLite tests: what a model holds and what it
computes, as LiteRT sees it.

    python3 scripts/oracles/tflite_oracle.py run MODEL --seed N --out DIR [--shape NAME=D1,D2,...] [--all-tensors]
    python3 scripts/oracles/tflite_oracle.py tensors MODEL

`run` feeds seeded random inputs (tflite_common.random_inputs: the same data check_tflite_parts.py
feeds for that seed) and writes them and LiteRT's outputs as .npy files in DIR, with
DIR/index.json: {"model", "seed", "inputs": [{"name", "file", "dtype", "shape"}], "outputs": [...]}
in the model's input/output order. File names are the tensor names sanitised (in3_NAME.npy,
out0_NAME.npy: the position keeps two names that sanitise alike apart). --all-tensors adds every
other non-constant tensor of subgraph 0 under "tensors" (t17_NAME.npy, 17 its index), from a
run that keeps them (see tflite_common.py for why that run is trustworthy).

`tensors` prints a JSON summary: subgraph and signature counts, inputs, outputs, every tensor
of subgraph 0 (index, name, dtype, shape, shape_signature, quantization, constant), and the
operators counted by builtin name (LiteRT's node list without the default delegate, whose
node would otherwise be counted as "DELEGATE").
"""
import argparse
import collections
import json
import pathlib
import sys

import numpy as np

import tflite_common as tc


def describe(d, fb=None):
    scales, zero_points, axis = tc.quant(d)
    out = {
        "index": int(d["index"]),
        "name": d["name"],
        "dtype": np.dtype(d["dtype"]).name,
        "shape": [int(x) for x in d["shape"]],
        "shape_signature": [int(x) for x in d["shape_signature"]],
        "quantization": {"scales": scales, "zero_points": zero_points, "quantized_dimension": axis},
    }
    if fb is not None:
        out["constant"] = fb.is_constant(d["index"]) if d["index"] < fb.graph.TensorsLength() else False
    return out


def tensors(args):
    interp = tc.interpreter(args.model)
    interp.allocate_tensors()
    fb = tc.Flatbuffer(args.model)
    ops = collections.Counter(o["op_name"] for o in interp._get_ops_details())
    summary = {
        "model": str(args.model),
        "subgraphs": interp.num_subgraphs(),
        "signatures": {k: v for k, v in interp.get_signature_list().items()},
        "inputs": [describe(d) for d in interp.get_input_details()],
        "outputs": [describe(d) for d in interp.get_output_details()],
        # Subgraph 0's tensors as the file lists them (LiteRT's own scratch tensors, past the
        # file's count, are left out).
        "tensors": [describe(d, fb) for d in interp.get_tensor_details(0)
                    if d["index"] < fb.graph.TensorsLength()],
        "operators": sum(ops.values()),
        "ops": dict(sorted(ops.items())),
    }
    json.dump(summary, sys.stdout, indent=1)
    print()


def run(args):
    interp = tc.interpreter(args.model, preserve=args.all_tensors)
    interp.allocate_tensors()
    feeds = tc.random_inputs(interp, np.random.default_rng(args.seed), tc.parse_shapes(args.shape))
    try:
        tc.feed(interp, feeds)
        interp.invoke()
    except (RuntimeError, ValueError) as e:
        sys.exit(f"error: LiteRT cannot run {args.model} (dynamic dims are taken as 1; --shape "
                 f"NAME=D1,D2,... sets them): {e}")
    args.out.mkdir(parents=True, exist_ok=True)

    def save(prefix, name, value):
        file = f"{prefix}_{tc.sanitize(name)}.npy"
        np.save(args.out / file, value)
        return {"name": name, "file": file, "dtype": value.dtype.name, "shape": list(value.shape)}

    ins = interp.get_input_details()
    outs = interp.get_output_details()
    index = {
        "model": str(args.model),
        "seed": args.seed,
        "inputs": [save(f"in{i}", d["name"], feeds[d["name"]]) for i, d in enumerate(ins)],
        "outputs": [save(f"out{i}", d["name"], interp.get_tensor(d["index"]).copy())
                    for i, d in enumerate(outs)],
    }
    if args.all_tensors:
        fb = tc.Flatbuffer(args.model)
        skip = {d["index"] for d in ins + outs}
        index["tensors"] = [
            save(f"t{d['index']}", d["name"], interp.get_tensor(d["index"]).copy())
            for d in interp.get_tensor_details(0)
            if d["index"] < fb.graph.TensorsLength() and d["index"] not in skip
            and not fb.is_constant(d["index"])]
    (args.out / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    print(f"{args.out}: {len(index['inputs'])} inputs, {len(index['outputs'])} outputs"
          + (f", {len(index['tensors'])} intermediate tensors" if args.all_tensors else "")
          + f" of {args.model.name} (seed {args.seed})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="seeded inputs and LiteRT's outputs as .npy files")
    r.add_argument("model", type=pathlib.Path)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--out", type=pathlib.Path, required=True)
    r.add_argument("--shape", action="append", default=[], help="NAME=D1,D2,...: an input's shape")
    r.add_argument("--all-tensors", action="store_true", help="also every intermediate tensor")
    t = sub.add_parser("tensors", help="print the model as LiteRT sees it, as JSON")
    t.add_argument("model", type=pathlib.Path)
    args = ap.parse_args()
    if args.cmd == "run":
        run(args)
    else:
        tensors(args)


if __name__ == "__main__":
    main()
