#!/usr/bin/env python3
"""`cleave verify` with its defaults on random 3-device splits of the randomised light models,
on tract and on ONNX Runtime, and once more after miswiring one part: correct splits must
pass, miswired ones fail. Writes a markdown table (docs/verify-matrix.md).

A miswiring feeds a part the wrong tensor: one of its inputs is renamed, in the part and in
the connection file, to another tensor the runner holds at that point (a source input or an
earlier part's output) of the same type and shape, as a wrong edge in a partitioner would.
Splits where no such tensor exists are reported as such.

    python3 scripts/reports/verify_matrix.py [--cleave PATH] [--seeds 3] [--out docs/verify-matrix.md]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import shutil
import subprocess
import sys
import tempfile

import onnx

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
HERE = pathlib.Path(__file__).resolve().parent
LIGHT = ["light_bvlc_alexnet", "light_densenet121", "light_inception_v1", "light_inception_v2", "light_resnet50",
         "light_shufflenet", "light_squeezenet", "light_vgg19", "light_zfnet512"]
DEVICES = ["npu", "gpu", "cpu"]


def verify(cleave, model, conn, engine):
    args = [cleave, "verify", "--quiet", str(model), str(conn), "--boundaries", "--json"]
    if engine == "ort":
        args += ["--reference", "ort", "--engine", ",".join(f"{d}=ort" for d in DEVICES)]
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode not in (0, 1):
        return {"error": (p.stderr.strip().splitlines() or ["?"])[-1]}
    j = json.loads(p.stdout)
    worst = max((t["rel_l2"] for t in j["tensors"]), default=0.0)
    return {"passed": j["passed"], "worst": worst, "tensors": len(j["tensors"])}


def types_of(m: onnx.ModelProto) -> dict[str, tuple]:
    out = {}
    for vi in list(m.graph.input) + list(m.graph.output):
        t = vi.type.tensor_type
        out[vi.name] = (t.elem_type, tuple(d.dim_value if d.HasField("dim_value") else d.dim_param for d in t.shape.dim))
    return out


def miswire(conn_path: pathlib.Path, rng: random.Random) -> str | None:
    """Renames one part input to another available tensor of the same type; returns what."""
    conn = json.loads(conn_path.read_text())
    work = conn_path.parent
    available = {}  # name -> type, in the order the runner has them
    src = onnx.load(work / conn["source"]["file"], load_external_data=False)
    for vi in src.graph.input:
        t = vi.type.tensor_type
        available[vi.name] = (t.elem_type, tuple(d.dim_value if d.HasField("dim_value") else d.dim_param for d in t.shape.dim))
    candidates = []
    for i, part in enumerate(conn["parts"]):
        m = onnx.load(work / part["file"], load_external_data=False)
        types = types_of(m)
        for name in part["inputs"]:
            others = [o for o, ty in available.items() if o != name and ty == types.get(name) and o not in part["inputs"]]
            if others:
                candidates.append((i, name, others))
        for o in part["outputs"]:
            available[o] = types.get(o)
    if not candidates:
        return None
    i, name, others = rng.choice(candidates)
    other = rng.choice(others)
    part = conn["parts"][i]
    path = work / part["file"]
    m = onnx.load(path, load_external_data=False)
    for vi in m.graph.input:
        if vi.name == name:
            vi.name = other
    for node in m.graph.node:
        node.input[:] = [other if x == name else x for x in node.input]
    onnx.save(m, path)
    part["inputs"] = [other if x == name else x for x in part["inputs"]]
    conn_path.write_text(json.dumps(conn, indent=2))
    return f"part {i + 1} reads '{other}' for '{name}'"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target"))
    ap.add_argument("--cleave", default=str(pathlib.Path(target) / "debug" / "cleave"))
    ap.add_argument("--data", type=pathlib.Path, default=pathlib.Path(os.environ.get("CLEAVE_TEST_DATA", pathlib.Path.home() / ".cache/cleave/test-data")) / "light-random")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / "docs" / "verify-matrix.md")
    ap.add_argument("models", nargs="*", default=LIGHT)
    args = ap.parse_args()
    rows, bad = [], []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for name in args.models:
            model = args.data / f"{name}.onnx"
            for seed in range(args.seeds):
                part = tmp / f"{name}.{seed}.part"
                part.write_text(subprocess.run([sys.executable, str(HERE / "random_part.py"), str(model), ",".join(DEVICES), str(seed)],
                                               capture_output=True, text=True, check=True).stdout)
                work = tmp / f"{name}.{seed}"
                subprocess.run([args.cleave, "partition", "--quiet", str(model), "--rules", str(part), "-o", str(work)],
                               capture_output=True, text=True, check=True)
                conn = work / f"{model.stem}.conn.json"
                nparts = len(json.loads(conn.read_text())["parts"])
                row = {"model": name.removeprefix("light_"), "seed": seed, "parts": nparts}
                for engine in ("tract", "ort"):
                    row[engine] = verify(args.cleave, model, conn, engine)
                wrong = tmp / f"{name}.{seed}.wrong"
                shutil.copytree(work, wrong)
                what = miswire(wrong / conn.name, random.Random(seed))
                row["miswire"] = what
                for engine in ("tract", "ort"):
                    row[f"{engine}_wrong"] = verify(args.cleave, model, wrong / conn.name, engine) if what else None
                rows.append(row)
                for engine in ("tract", "ort"):
                    r, w = row[engine], row[f"{engine}_wrong"]
                    if not r.get("passed"):
                        bad.append(f"{name} seed {seed} {engine}: a correct split fails: {r}")
                    if w is not None and w.get("passed", True):
                        bad.append(f"{name} seed {seed} {engine}: a miswired split passes: {w}")
                print(json.dumps(row), flush=True)

    def cell(r):
        if r is None:
            return "-"
        if "error" in r:
            return f"error: {r['error']}"
        return f"{'pass' if r['passed'] else 'FAIL'} ({r['worst']:.1e})"

    lines = ["# `cleave verify` with defaults: correct vs miswired splits", "",
             "Generated by `scripts/reports/verify_matrix.py`; do not edit. Each randomised light model, split at random over",
             "3 devices (`scripts/reports/random_part.py`, seeds 0..), verified with `cleave verify --boundaries` and no",
             "tolerance flags (relative L2 error 1e-3 per float tensor) on tract (parts and whole) and on ONNX",
             "Runtime; then one part input is rewired to another tensor of the same type and shape that the",
             "runner holds, and verified again. Cells: result (worst relative L2 error over the compared tensors).", "",
             "| model | seed | parts | tensors | tract | ORT | miswiring | tract, miswired | ORT, miswired |",
             "|---|---:|---:|---:|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['seed']} | {r['parts']} | {r['tract'].get('tensors', '-')} | {cell(r['tract'])} | {cell(r['ort'])} | "
                     f"{r['miswire'] or 'no same-typed tensor to swap in'} | {cell(r['tract_wrong'])} | {cell(r['ort_wrong'])} |")
    lines += ["", "Problems: " + ("none." if not bad else ""), *[f"- {b}" for b in bad], ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
