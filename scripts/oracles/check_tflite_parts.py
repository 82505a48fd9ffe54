"""Independent check of a TFLite/circle partition with LiteRT (and onert), without cleave.

    python3 scripts/oracles/check_tflite_parts.py WORKDIR/stem.conn.json [SOURCE_MODEL] [--seed N] [--rtol R] [--atol A]
        [--int-tol K] [--shape NAME=1,192,192,3] [--input NAME=FILE.npy] [--circle-onert] [--onert-backends cpu]

The connection file is ONE circle-partitioner's .conn.json: "source" {file, inputs, outputs}
and "parts" [{file, inputs, outputs}], tensor names of subgraph 0, files relative to the
connection file's folder. SOURCE_MODEL defaults to the source file it names.

1. Structure, cheaply: the source's inputs and outputs are the connection file's; every part
   loads in LiteRT (in onert with --circle-onert for .circle parts), its inputs and outputs are
   exactly the connection file's lists (by name, any order), and every boundary tensor's dtype
   and quantization (scales, zero points, axis) equal the source's tensor of that name. Every
   part output feeds another part or is a source output, no tensor has two producers, and
   every source output has a producer.
2. LiteRT runs the source once on seeded random inputs, keeping every intermediate tensor
   (preserve_all_tensors, without the default XNNPACK delegate, whose tensors are not kept:
   see tflite_common.py). The boundary tensors are also made graph outputs of a copy of the
   source and run again: a tensor LiteRT computed in place would differ there, and the graph
   output, which is never overwritten, is the one compared with.
3. Every part runs on the source's values of its inputs (isolated: a wrong part is named even
   where its error would drift on), then the parts run chained, each once its inputs are
   ready (ONE's order rule), fed from the random inputs and earlier parts' outputs. Each time
   every part output (every boundary tensor and the final outputs) is compared with the
   source's tensor of that name: floats within atol + rtol * |want|, integers (quantized or
   not) exact or within --int-tol (--chain-int-tol for the chained run: an engine that rounds
   one step differently, onert on int8, shifts the next part's inputs and so its outputs more).

With --circle-onert, parts ending in .circle run in onert (ONE's runtime, onert==0.1.0's native
nnfw_session), inputs and outputs matched by position to the names in the circle file; the
rest run in LiteRT. Without it, .circle parts run in LiteRT too (tflite_common.load_bytes).
onert 0.1.0's cpu backend runs none of the seven face-detection models whole (it lacks PRELU,
DEQUANTIZE of float16, DENSIFY of 4-D sparse weights, RESHAPE without a shape input, int8
MAX_POOL_2D), so parts for it must leave those operators to LiteRT parts; it runs CONV_2D,
DEPTHWISE_CONV_2D, ADD, RELU, PAD, MAX_POOL_2D (float), CONCATENATION, RESIZE_BILINEAR,
DEPTH_TO_SPACE, QUANTIZE and the int8 CONV_2D/DEPTHWISE_CONV_2D/ADD/PAD of these models.

4. With --invokes N (stateful models: resource variables keep state between invokes), fresh
   interpreters of the parts run N invokes in a row, chained, on N seeded random inputs, and
   every part output of every invoke is compared with the same tensor of a fresh copy of the
   source (boundary tensors made graph outputs) run the same N times: a variable read in one
   part and written in another, or state lost between parts, shows as a difference at the
   second invoke or later. Steps 2 and 3 run each part on fresh interpreters too.

Exits 1 on any mismatch, printing the worst tensor; prints one summary line otherwise.
"""
import argparse
import re
import json
import os
import pathlib
import sys

import numpy as np

import tflite_common as tc


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


class LiteRtPart:
    """A part run in LiteRT."""
    engine = "LiteRT"

    def __init__(self, path, prepared=False):
        self.interp = tc.interpreter(path)
        try:
            self.interp.allocate_tensors()
        except RuntimeError as e:
            # A dynamic dim inside the source (a Keras model's batch and time axes) reaches a
            # part's input as the converter's placeholder 1, which a 3x3 VALID convolution
            # cannot prepare; the first run resizes the inputs to the data and allocates.
            # Parts written with the dims a run showed (cleave --learn-dims) must prepare.
            if prepared:
                fail(f"{path}: cannot be allocated before a run: {str(e).strip().splitlines()[0]}")
        self.inputs = [d["name"] for d in self.interp.get_input_details()]
        self.outputs = [d["name"] for d in self.interp.get_output_details()]

    def io_details(self):
        """name -> (dtype, quantization) of every input and output."""
        return {d["name"]: (np.dtype(d["dtype"]), tc.quant(d))
                for d in self.interp.get_input_details() + self.interp.get_output_details()}

    def run(self, values):
        tc.feed(self.interp, values)
        self.interp.invoke()
        return {d["name"]: self.interp.get_tensor(d["index"]).copy()
                for d in self.interp.get_output_details()}


class OnertPart:
    """A .circle part run in onert. onert's Python API knows tensors by position only, so the
    names (and quantization, which its tensor info lacks) come from the circle file.

    It drives the native nnfw_session rather than onert.infer.session.infer(), which in 0.1.0
    calls set_input_tensorinfo on every input before its first run: that fails for uint8
    inputs ("Cannot convert string to NNFW_TYPE: 'uint8'"), and its error path is truncated
    to `raise Oner` (a NameError). Here tensor info is set only where a shape must change."""
    engine = "onert"

    def __init__(self, path, backends):
        from onert.native.libnnfw_api_pybind import infer
        self.fb = tc.Flatbuffer(path)
        self.inputs = self.fb.inputs()
        self.outputs = self.fb.outputs()
        # With outputs onert allocates, its linear executor frees a part output another op of
        # the part reads and returns the reused buffer (onert 0.1.0, the MEAN part's 1.68 of
        # docs/engine-disagreements.md); the dataflow executor keeps outputs whole.
        os.environ["EXECUTOR"] = "Dataflow"
        self.session = infer.nnfw_session(str(path), backends)
        self.prepared = False
        # The session's own view, to catch a file the loader reads differently from the schema.
        g = self.fb.graph
        n_in, n_out = self.session.input_size(), self.session.output_size()
        if (n_in, n_out) != (g.InputsLength(), g.OutputsLength()):
            raise ValueError(f"onert sees {n_in} inputs / {n_out} outputs, the file has "
                             f"{g.InputsLength()} / {g.OutputsLength()}")
        self.in_info = [self.session.input_tensorinfo(i) for i in range(n_in)]
        out_info = [self.session.output_tensorinfo(i) for i in range(n_out)]
        idx = [g.Inputs(i) for i in range(n_in)] + [g.Outputs(i) for i in range(n_out)]
        self.details = {self.fb.name(i): (np.dtype(info.dtype), self.fb.quant(i))
                        for i, info in zip(idx, self.in_info + out_info)}

    def io_details(self):
        return self.details

    def run(self, values):
        from onert.native.libnnfw_api_pybind import prepare_config
        arrays = [np.ascontiguousarray(values[n], dtype=np.dtype(info.dtype))
                  for n, info in zip(self.inputs, self.in_info)]
        if not self.prepared:
            for i, (info, a) in enumerate(zip(self.in_info, arrays)):
                if list(info.dims[:info.rank]) != list(a.shape):  # -1 dims, or a resized input
                    info.rank = a.ndim
                    info.dims = list(a.shape)
                    self.session.set_input_tensorinfo(i, info)
            # Outputs in buffers onert allocates, read back with get_output.
            self.session.set_prepare_config(prepare_config.ENABLE_INTERNAL_OUTPUT_ALLOC)
            self.session.prepare()
            self.prepared = True
        for i, a in enumerate(arrays):
            self.session.set_input(i, a)
        self.session.run()
        return {n: np.array(self.session.get_output(i), copy=True)
                for i, n in enumerate(self.outputs)}


def load_part(path, args):
    if args.circle_onert and path.suffix == ".circle":
        return OnertPart(path, args.onert_backends)
    return LiteRtPart(path, args.prepared)


def compare(name, got, want, rtol, atol, int_tol, int_flag="--int-tol"):
    """(error or None, max abs diff)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"{name}: shape {got.shape} != {want.shape}", np.inf
    if got.dtype != want.dtype:
        return f"{name}: dtype {got.dtype} != {want.dtype}", np.inf
    if got.size == 0:
        return None, 0.0
    if got.dtype.kind in "fc":
        g, w = got.astype(np.float64), want.astype(np.float64)
        same_nan = np.isnan(g) & np.isnan(w)
        diff = np.where(same_nan, 0.0, np.abs(g - w))
        diff = np.where(np.isnan(diff), np.inf, diff)
        worst = float(diff.max())
        if (diff > atol + rtol * np.abs(np.nan_to_num(w))).any():
            return f"{name}: max abs diff {worst:.3g} beyond rtol {rtol} / atol {atol}", worst
        return None, worst
    if got.dtype == np.bool_:
        worst = float((got != want).sum() > 0)
    else:
        worst = float(np.abs(got.astype(np.int64) - want.astype(np.int64)).max())
    if worst > (0 if got.dtype == np.bool_ else int_tol):
        return f"{name}: integer values differ by up to {worst:g} ({int_flag} {int_tol})", worst
    return None, worst


def reference(source_path, conn_source, boundary, shapes, given, seed):
    """Runs the source: (inputs fed, name -> source tensor value, name -> source detail,
    notes). Values come from the preserve-all run, overridden by the probe run's graph outputs."""
    interp = tc.interpreter(source_path, preserve=True)
    interp.allocate_tensors()
    ins = [d["name"] for d in interp.get_input_details()]
    outs = [d["name"] for d in interp.get_output_details()]
    if sorted(ins) != sorted(conn_source["inputs"]) or sorted(outs) != sorted(conn_source["outputs"]):
        fail(f"{source_path}: inputs {ins} / outputs {outs} are not the connection file's source "
             f"inputs {conn_source['inputs']} / outputs {conn_source['outputs']}")

    # Subgraph 0's tensors by name; a boundary name must name exactly one of them.
    by_name = {}
    for d in interp.get_tensor_details(0):
        by_name.setdefault(d["name"], []).append(d)
    details = {}
    by_index = {d["index"]: d for d in interp.get_tensor_details(0)}
    for t in boundary:
        hits = by_name.get(t, [])
        renamed = re.fullmatch(r".*#(\d+)_*", t)
        if not hits and renamed and int(renamed.group(1)) in by_index:
            # cleave calls a tensor with an empty or repeated name NAME#INDEX (its index in
            # subgraph 0), in its parts too.
            hits = [by_index[int(renamed.group(1))]]
        if not hits and t not in conn_source["inputs"] + conn_source["outputs"]:
            # LiteRT computes some constants at load time and keeps no tensor for them (the
            # output of DENSIFY on sparse weights): a partition may still pass one between
            # parts. It is checked through everything computed from it.
            continue
        if len(hits) != 1:
            fail(f"boundary tensor {t!r} names {len(hits)} tensors in subgraph 0 of {source_path}")
        details[t] = hits[0]

    feeds = tc.random_inputs(interp, np.random.default_rng(seed), shapes)
    feeds.update(given)
    try:
        tc.feed(interp, feeds)
        interp.invoke()
    except (RuntimeError, ValueError) as e:
        shown = ", ".join(f"{n}={','.join(map(str, v.shape))}" for n, v in feeds.items())
        fail(f"LiteRT cannot run {source_path} on inputs {shown} (dynamic dims are taken as 1; "
             f"--shape NAME=D1,D2,... sets them): {e}")
    values = {t: interp.get_tensor(details[t]["index"]).copy() for t in boundary if t in details}

    # The probe: the same model with every boundary tensor a graph output.
    from ai_edge_litert.tools import flatbuffer_utils as fu
    model = fu.convert_bytearray_to_object(bytearray(tc.load_bytes(source_path)))
    g = model.subgraphs[0]
    extra = [details[t]["index"] for t in boundary
             if t in details and details[t]["index"] not in list(g.outputs)]
    # Constants cannot be graph outputs; they are also never computed in place.
    fb = tc.Flatbuffer(source_path)
    extra = [i for i in extra if not fb.is_constant(i) and i not in list(g.inputs)]
    notes = []
    if extra:
        g.outputs = list(g.outputs) + extra
        try:
            probe = tc.interpreter(content=fu.convert_object_to_bytearray(model))
        except ValueError as e:
            # LiteRT's flatbuffer utilities drop data stored after the flatbuffer
            # (Buffer.offset); the preserved values stand alone then.
            notes.append(f"note: no probe run ({e}); comparing with LiteRT's preserved values")
            return feeds, values, details, notes
        tc.feed(probe, feeds)
        probe.invoke()
        for d in probe.get_output_details():
            t = d["name"]
            if t not in values:
                continue
            v = probe.get_tensor(d["index"]).copy()
            if not np.array_equal(v, values[t], equal_nan=v.dtype.kind == "f"):
                notes.append(f"note: LiteRT's preserved value of {t} differs from it as a graph "
                             "output (computed in place?); comparing with the graph output")
            values[t] = v
    return feeds, values, details, notes


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("conn", type=pathlib.Path)
    ap.add_argument("source", type=pathlib.Path, nargs="?",
                    help="the source model (default: the connection file's source file)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--atol", type=float, default=1e-5)
    ap.add_argument("--int-tol", type=int, default=0,
                    help="largest difference allowed in integer tensors (1: off by one)")
    ap.add_argument("--chain-int-tol", type=int, default=None,
                    help="the same for the chained run, where a part's rounding differences reach "
                         "the next part's inputs (default: --int-tol)")
    ap.add_argument("--shape", action="append", default=[], help="NAME=D1,D2,...: an input's shape")
    ap.add_argument("--input", action="append", default=[], help="NAME=FILE.npy: a given input")
    ap.add_argument("--prepared", action="store_true",
                    help="every LiteRT part must allocate before any run, its inputs not resized")
    ap.add_argument("--circle-onert", action="store_true", help="run .circle parts in onert")
    ap.add_argument("--onert-backends", default="cpu", help="onert backends (default: cpu)")
    ap.add_argument("--invokes", type=int, default=1,
                    help="successive invokes with state carried, compared invoke by invoke (step 4)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every part output's max diff")
    args = ap.parse_args()
    if args.chain_int_tol is None:
        args.chain_int_tol = args.int_tol

    conn = json.loads(args.conn.read_text())
    work = args.conn.parent
    source_path = args.source or work / conn["source"]["file"]
    parts = conn["parts"]
    if not parts:
        fail(f"{args.conn}: no parts")

    # Structure of the connection file itself.
    producer = {}
    for p in parts:
        for t in p["outputs"]:
            if t in producer:
                fail(f"{t} is an output of both {producer[t]} and {p['file']}")
            producer[t] = p["file"]
    consumed = {t for p in parts for t in p["inputs"]}
    for p in parts:
        for t in p["outputs"]:
            if t not in consumed and t not in conn["source"]["outputs"]:
                fail(f"{p['file']}: output {t} is neither another part's input nor a source output")
    for t in conn["source"]["outputs"]:
        if t not in producer:
            fail(f"source output {t} is no part's output")
    # An order to run them in: each part once all its inputs are ready (ONE's rule).
    ready = set(conn["source"]["inputs"])
    pending = list(parts)
    order = []
    while pending:
        p = next((p for p in pending if all(t in ready for t in p["inputs"])), None)
        if p is None:
            missing = {p["file"]: [t for t in p["inputs"] if t not in ready] for p in pending}
            fail(f"model partition or configuration has problems: no part is runnable; waiting on {missing}")
        pending.remove(p)
        order.append(p)
        ready.update(p["outputs"])

    boundary = []
    for p in parts:
        for t in p["inputs"] + p["outputs"]:
            if t not in boundary:
                boundary.append(t)
    given = {}
    for s in args.input:
        name, _, file = s.partition("=")
        if name not in conn["source"]["inputs"]:
            fail(f"--input {name}: not a source input ({conn['source']['inputs']})")
        given[name] = np.load(file)
    feeds, want, src_details, notes = reference(
        source_path, conn["source"], boundary, tc.parse_shapes(args.shape), given, args.seed)
    for n in notes:
        print(n, file=sys.stderr)

    # Every part loads; its inputs/outputs and their dtypes/quantization are the conn file's.
    engines = {}
    for p in parts:
        path = work / p["file"]
        try:
            part = load_part(path, args)
        except Exception as e:  # LiteRT and onert raise their own types
            fail(f"{path} does not load in {'onert' if args.circle_onert and path.suffix == '.circle' else 'LiteRT'}: {e}")
        for what, have, want_ in (("inputs", part.inputs, p["inputs"]), ("outputs", part.outputs, p["outputs"])):
            if sorted(have) != sorted(want_):
                fail(f"{p['file']}: its {what} are not the connection file's: the file lacks "
                     f"{sorted(set(want_) - set(have))}, has besides {sorted(set(have) - set(want_))}"
                     + (" (a name twice)" if set(have) == set(want_) else ""))
        for t, (dtype, q) in part.io_details().items():
            if t not in src_details:
                continue
            d = src_details[t]
            if dtype != np.dtype(d["dtype"]):
                fail(f"{p['file']}: {t} is {dtype}, {np.dtype(d['dtype'])} in the source")
            if q != tc.quant(d):
                fail(f"{p['file']}: {t} has quantization {q}, {tc.quant(d)} in the source")
        engines[p["file"]] = part

    def run(p, inputs):
        try:
            return engines[p["file"]].run(inputs)
        except Exception as e:
            fail(f"{p['file']} failed to run in {engines[p['file']].engine}: {e}")

    # Isolated: each part fed the source's own values of its inputs, so a part that computes
    # wrongly is named even where the error would drift through later parts.
    isolated = {}
    for p in order:
        isolated.update(run(p, {t: want[t] if t in want else isolated[t] for t in p["inputs"]}))

    # Chained: in the order found above, fed from the random inputs and the earlier parts'
    # outputs, as the partition would run; on fresh interpreters, whose state (a stateful
    # model's variables) has not seen the isolated run.
    engines.update({p["file"]: load_part(work / p["file"], args) for p in parts})
    chained = dict(feeds)
    for p in order:
        chained.update(run(p, {t: chained[t] for t in p["inputs"]}))

    # Every part output is compared, and every source output is a part output (checked above):
    # the final outputs are among them.
    finals = set(conn["source"]["outputs"])
    failures = []
    rows = []  # (tensor, isolated diff, chained diff)
    unseen = []  # boundary tensors LiteRT keeps no tensor for in the source
    for p in parts:
        where = f"{p['file']} ({engines[p['file']].engine})"
        for t in p["outputs"]:
            if t not in want:
                unseen.append(t)
                continue
            err_i, diff_i = compare(t, isolated[t], want[t], args.rtol, args.atol, args.int_tol)
            err_c, diff_c = compare(t, chained[t], want[t], args.rtol, args.atol, args.chain_int_tol,
                                  "--chain-int-tol")
            rows.append((t, diff_i, diff_c))
            if err_i:
                failures.append(f"{where}, fed the source's values: {err_i}")
            elif err_c:
                failures.append(f"{where}, chained: {err_c}")
    worst_i = max(r[1] for r in rows)
    worst_c = max(r[2] for r in rows)
    if args.verbose:
        for t, di, dc in rows:
            print(f"  {t}: max diff {di:.3g} isolated, {dc:.3g} chained{' (final)' if t in finals else ''}")
    if failures:
        print(f"{args.conn}: {len(failures)} of {len(rows)} part outputs differ from the source; "
              f"first: {failures[0]}")
        for t, di, dc in sorted(rows, key=lambda r: -max(r[1], r[2]))[:5]:
            print(f"  {t}: max diff {di:.3g} isolated, {dc:.3g} chained")
        sys.exit(1)
    successive = ""
    if args.invokes > 1:
        engines.update({p["file"]: load_part(work / p["file"], args) for p in parts})
        successive = invoke_in_a_row(args, source_path, conn, order, run, tc.parse_shapes(args.shape), given)
    used = sorted({e.engine for e in engines.values()})
    print(f"{args.conn}: {len(parts)} parts load in {'/'.join(used)} with the connection file's "
          f"inputs, outputs, dtypes and quantization; {len(rows)} part outputs ({len(finals)} final, "
          f"{len(rows) - len(finals)} boundary) match LiteRT on the whole model, max abs diff "
          f"{worst_i:.3g} with each part on the source's inputs, {worst_c:.3g} chained"
          + (f"; {len(unseen)} boundary constant(s) LiteRT folds away at load, checked through "
             f"what they feed ({', '.join(unseen[:3])})" if unseen else "") + successive)


def invoke_in_a_row(args, source_path, conn, order, run, shapes, given):
    """Step 4: the parts (fresh) and a fresh probe of the source, args.invokes times each."""
    from ai_edge_litert.tools import flatbuffer_utils as fu
    model = fu.convert_bytearray_to_object(bytearray(tc.load_bytes(source_path)))
    g = model.subgraphs[0]
    fb = tc.Flatbuffer(source_path)
    names = {fb.name(i): i for i in range(len(g.tensors))}
    wanted = [t for p in order for t in p["outputs"]]
    extra = [names[t] for t in wanted if t in names and names[t] not in list(g.outputs)
             and not fb.is_constant(names[t])]
    g.outputs = list(g.outputs) + extra
    probe = tc.interpreter(content=fu.convert_object_to_bytearray(model))
    probe.allocate_tensors()
    worst = 0.0
    for k in range(args.invokes):
        feeds = tc.random_inputs(probe, np.random.default_rng(args.seed + 1 + k), shapes)
        feeds.update(given)
        tc.feed(probe, feeds)
        probe.invoke()
        want = {d["name"]: probe.get_tensor(d["index"]).copy() for d in probe.get_output_details()}
        chained = dict(feeds)
        for p in order:
            chained.update(run(p, {t: chained[t] for t in p["inputs"]}))
        for t in wanted:
            if t not in want:
                continue
            err, diff = compare(t, chained[t], want[t], args.rtol, args.atol, args.chain_int_tol,
                                "--chain-int-tol")
            if err:
                print(f"{args.conn}: invoke {k + 1} of {args.invokes} in a row, state carried: {err}")
                sys.exit(1)
            worst = max(worst, diff)
    return (f"; {args.invokes} invokes in a row on fresh interpreters, state carried: every part "
            f"output matches the source's, max abs diff {worst:.3g}")


if __name__ == "__main__":
    main()
