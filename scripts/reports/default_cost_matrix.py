#!/usr/bin/env python3
"""Placement with cleave's built-in cost estimates (no --costs), measured on this host.

For each real model and each accelerator list (`myriad,cpu`, `nnapi,cpu`, `coreml,cpu`),
`cleave bench --objective latency` with no cost file: it places by the devices' default cost
models (crates/device/src/profiles/costs.toml) and times, interleaved in one process, the
chosen placement, the capability placement and each single device that runs the whole model.
Every device runs on ONNX Runtime here (`--engine DEV=ort,cpu=ort`), so the parts' launches
and copies between them are real, though the accelerators are not: the measured column says
what the split costs on the host, the predicted one what the estimates expect on the device.

Usage: python3 scripts/reports/default_cost_matrix.py CLEAVE [--runs R] [--only NAME,...] [--md FILE]
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

DATA = Path(os.environ.get("CLEAVE_TEST_DATA", Path.home() / ".cache/cleave/test-data"))
MODELS = [  # name, file under DATA, --shape flags
    ("yolov8n (nudenet 320)", "corpus/nudenet_320n.onnx", ["images=1,3,320,320"]),
    ("PP-OCRv4 rec", "corpus/ppocrv4_rec.onnx", ["x=1,3,48,320"]),
    ("PP-OCRv4 det", "corpus/ppocrv4_det.onnx", ["x=1,3,256,256"]),
    ("PicoDet layout", "corpus/picodet_layout.onnx", []),
    ("ddddocr det", "corpus/ddddocr_det.onnx", []),
    ("resnet50", "light-random/light_resnet50.onnx", []),
    ("squeezenet", "light-random/light_squeezenet.onnx", []),
]
ACCELERATORS = ["myriad", "nnapi", "coreml"]


def bench(cleave, path, shapes, acc, runs):
    cmd = [cleave, "bench", str(path), "--devices", f"{acc},cpu", "--engine",
           f"{acc}=ort,cpu=ort", "--objective", "latency", "--runs", str(runs), "--json"]
    for s in shapes:
        cmd += ["--shape", s]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or ["?"])[-1]
    return json.loads(p.stdout), None


def cell(row):
    if row is None:
        return "–"
    return f"{len(row['per_part'])} / {row['predicted_ms']:.1f} / {row['measured_ms']:.1f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cleave")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--only", default=None)
    ap.add_argument("--md", default=None, help="also write the table to this file")
    a = ap.parse_args()
    only = set(a.only.split(",")) if a.only else None
    lines = [
        "| model | devices | capability: parts / predicted / measured ms | chosen | all on cpu |",
        "|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    cpu_errors = []
    for name, rel, shapes in MODELS:
        if only and name not in only:
            continue
        path = DATA / rel
        if not path.exists():
            print(f"missing {path}", file=sys.stderr)
            continue
        for acc in ACCELERATORS:
            r, err = bench(a.cleave, path, shapes, acc, a.runs)
            if r is None:
                line = f"| {name} | {acc},cpu | refused: {err} | | |"
            else:
                rows = {x["placement"]: x for x in r["rows"]}
                chosen = next(x for k, x in rows.items() if k.startswith("chosen"))
                cap = next((x for k, x in rows.items() if "capability" in k), None)
                cpu = next((x for k, x in rows.items() if "all on cpu" in k), None)
                if cpu is not None:
                    cpu_errors.append((name, cpu["predicted_ms"], cpu["measured_ms"]))
                line = f"| {name} | {acc},cpu | {cell(cap)} | {cell(chosen)} | {cell(cpu)} |"
            print(line, flush=True)
            lines.append(line)
    seen = {}
    for name, pred, meas in cpu_errors:
        seen.setdefault(name, []).append((pred, meas))
    lines += ["", "| model | cpu predicted ms | ONNX Runtime measured ms (median of the runs) | predicted / measured |",
              "|---|---|---|---|"]
    for name, pm in seen.items():
        pred = pm[0][0]
        meas = sorted(m for _, m in pm)[len(pm) // 2]
        lines.append(f"| {name} | {pred:.1f} | {meas:.1f} | {pred / meas:.2f} |")
    print("\n".join(lines[-len(seen) - 3:]))
    if a.md:
        Path(a.md).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
