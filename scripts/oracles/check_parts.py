"""Independent check of a cleave partition with the onnx checker and onnxruntime.

    python3 scripts/oracles/check_parts.py WORKDIR/stem.conn.json [--seed N] [--rtol R] [--atol A] [--shape NAME=1,3,224,224] [--input NAME=FILE.npy]

1. Every part passes onnx.checker.check_model(full_check=True), given its path so that
   external data (parts sharing one weights file) is checked where it lies. When the source
   itself fails the checker (onnxruntime's optimizer writes its LayerNormalization into the
   ONNX domain at any opset, and onnxruntime runs it), the parts cannot pass it either: that
   is said, and onnxruntime alone checks them.
2. The parts run one after another in onnxruntime, fed from the source's inputs (seeded random
   data) and from earlier parts' outputs, and must reproduce the source model's outputs.
3. Every boundary tensor (each part input and output) must equal the same tensor computed
   inside the whole model: the source runs with those tensors added as graph outputs. A
   miswired part can leave final outputs intact (a saturated softmax hides it), so this is
   the check that sees wiring bugs.

Exits 1 on any mismatch, printing the worst tensor; prints one summary line otherwise.
"""
import argparse
import json
import pathlib
import sys

import numpy as np
import onnx
import onnxruntime as ort

DTYPES = {
    "tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_,
}


def session(model_bytes):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    # Full graph optimisation may fuse across what we compare: keep the graph as written.
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])


def random_inputs(sess, rng, shapes):
    feeds = {}
    for i in sess.get_inputs():
        dims = shapes.get(i.name) or [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
        dtype = DTYPES.get(i.type)
        if dtype is None:
            sys.exit(f"error: input {i.name} has type {i.type}, which this check does not generate")
        if np.issubdtype(dtype, np.floating):
            feeds[i.name] = rng.standard_normal(dims).astype(dtype)
        elif dtype is np.bool_:
            feeds[i.name] = rng.integers(0, 2, dims).astype(np.bool_)
        else:
            feeds[i.name] = rng.integers(0, 4, dims).astype(dtype)
    return feeds


def compare(name, got, want, rtol, atol):
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"{name}: shape {got.shape} != {want.shape}", np.inf
    if got.dtype.kind in "fc":
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        bad = diff > atol + rtol * np.abs(want.astype(np.float64))
        worst = float(diff.max()) if diff.size else 0.0
        if bad.any():
            return f"{name}: max abs diff {worst:.3g} beyond rtol {rtol} / atol {atol}", worst
        return None, worst
    if not np.array_equal(got, want):
        return f"{name}: integer values differ", np.inf
    return None, 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("conn", type=pathlib.Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--atol", type=float, default=1e-5)
    ap.add_argument("--shape", action="append", default=[])
    ap.add_argument("--input", action="append", default=[], help="NAME=FILE.npy: a given input")
    args = ap.parse_args()
    shapes = {}
    for s in args.shape:
        name, dims = s.split("=", 1)
        shapes[name] = [int(d) for d in dims.split(",")]

    conn = json.loads(args.conn.read_text())
    work = args.conn.parent
    source = onnx.load(str(work / conn["source"]["file"]))
    parts = conn["parts"]

    checker = "pass the onnx checker"
    try:
        onnx.checker.check_model(str(work / conn["source"]["file"]), full_check=True)
    except onnx.checker.ValidationError as e:
        checker = "are not checked by the onnx checker, which refuses the source too"
        print(f"note: the source fails the onnx checker ({str(e).splitlines()[0][:160]}); "
              "checking its parts with onnxruntime only", file=sys.stderr)
    else:
        for p in parts:
            # By path, so the checker also validates external data (location inside the folder,
            # no symbolic link, the file there) and does not load every part's weights.
            onnx.checker.check_model(str(work / p["file"]), full_check=True)

    boundary = []
    for p in parts:
        for t in p["inputs"] + p["outputs"]:
            if t not in boundary:
                boundary.append(t)
    probe = onnx.ModelProto()
    probe.CopyFrom(source)
    have = {o.name for o in probe.graph.output}
    for t in boundary:
        if t not in have:
            probe.graph.output.append(onnx.helper.make_empty_tensor_value_info(t))
    whole = session(probe.SerializeToString())
    feeds = random_inputs(whole, np.random.default_rng(args.seed), shapes)
    for s in args.input:
        name, file = s.split("=", 1)
        feeds[name] = np.load(file)
    reference = dict(zip([o.name for o in whole.get_outputs()], whole.run(None, feeds)))

    values = dict(feeds)
    for p in parts:
        sess = session(str(work / p["file"]))
        part_feeds = {i.name: values[i.name] for i in sess.get_inputs()}
        for name, v in zip([o.name for o in sess.get_outputs()], sess.run(None, part_feeds)):
            values[name] = v

    failures = []
    worst = 0.0
    checked = 0
    for t in list(conn["source"]["outputs"]) + boundary:
        if t in feeds:
            continue
        err, diff = compare(t, values[t], reference[t], args.rtol, args.atol)
        checked += 1
        worst = max(worst, diff)
        if err:
            failures.append(err)
    if failures:
        print(f"{args.conn}: {len(failures)} of {checked} tensors differ; first: {failures[0]}")
        sys.exit(1)
    print(f"{args.conn}: {len(parts)} parts {checker}; {checked} tensors (outputs and every boundary) match onnxruntime on the whole model, max abs diff {worst:.3g}")


if __name__ == "__main__":
    main()
