#!/usr/bin/env python3
"""Measures placement by cost on real engines: for each model and device setup, `cleave measure`
then `cleave bench --objective latency`, which times the chosen placement, the capability
placement and every single device able to run the whole model in interleaved rounds.

Setups (the devices are engines on one core each):
  tract-npu  --devices nnapi,cpu --engine nnapi=tract,cpu=ort  (NNAPI's supported ops served by tract)
  ort-npu    --devices nnapi,cpu --engine nnapi=ort,cpu=tract  (the reverse)
  two-full   --devices cpu,ort                                   (tract and ONNX Runtime, both full)

Usage: python3 scripts/reports/cost_matrix.py CLEAVE [--runs R] [--out docs/cost-placement.md] [--only NAME]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DATA = Path(os.environ.get("CLEAVE_TEST_DATA", Path.home() / ".cache/cleave/test-data"))
LIGHT = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
         "shufflenet", "squeezenet", "vgg19", "zfnet512"]
REAL = [  # corpus name, --shape flags
    ("nudenet_320n", ["images=1,3,320,320"]),
    ("ppocrv4_det", ["x=1,3,256,256"]),
    ("orientation", ["x=1,3,224,224"]),
    ("ddddocr_det", []),
]
SETUPS = {
    "tract-npu": ["--devices", "nnapi,cpu", "--engine", "nnapi=tract,cpu=ort"],
    "ort-npu": ["--devices", "nnapi,cpu", "--engine", "nnapi=ort,cpu=tract"],
    "two-full": ["--devices", "cpu,ort"],
}


def models():
    for n in LIGHT:
        yield n, DATA / "light-random" / f"light_{n}.onnx", []
    for n, shapes in REAL:
        yield n, DATA / "corpus" / f"{n}.onnx", shapes


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr.strip().splitlines()[-1:] if p.stderr else []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cleave")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", default=None, help="comma-separated model names")
    ap.add_argument("--repeats", type=int, default=10, help="profile's timed rounds")
    ap.add_argument("--setups", default=",".join(SETUPS))
    ap.add_argument("--jsonl", default=None, help="append each row here as it is measured")
    ap.add_argument("--from-jsonl", default=None, help="only write the table from these rows")
    args = ap.parse_args()
    if args.from_jsonl:
        rows = [json.loads(line) for line in open(args.from_jsonl)]
        write(rows, Path(args.out))
        return
    rows = []
    only = set(args.only.split(",")) if args.only else None
    setups = args.setups.split(",")

    def keep(row):
        rows.append(row)
        if args.jsonl:
            with open(args.jsonl, "a") as f:
                f.write(json.dumps(row) + "\n")

    with tempfile.TemporaryDirectory() as tmp:
        for name, path, shapes in models():
            if only and name not in only:
                continue
            flags = ["--optimize", "basic"] + [a for s in shapes for a in ("--shape", s)]
            for setup, dev in SETUPS.items():
                if setup not in setups:
                    continue
                costs = Path(tmp) / f"{name}.{setup}.json"
                t = time.time()
                rc, out, err = run([args.cleave, "measure", "--quiet", str(path), *dev, *flags,
                                    "--repeats", str(args.repeats), "-o", str(costs)])
                prof_s = time.time() - t
                if rc != 0:
                    keep({"model": name, "setup": setup, "error": f"profile: {err}"})
                    print(name, setup, "profile failed:", err, flush=True)
                    continue
                engines = [a for a in dev if "=" in a]
                bench_dev = [a for a in dev if a != "--engine" and "=" not in a]
                rc, out, err = run([args.cleave, "bench", "--quiet", str(path), *bench_dev,
                                    *(["--engine", engines[0]] if engines else []), *flags,
                                    "--objective", "latency", "--costs", str(costs),
                                    "--runs", str(args.runs), "--json"])
                if rc != 0:
                    keep({"model": name, "setup": setup, "error": f"bench: {err}"})
                    print(name, setup, "bench failed:", err, flush=True)
                    continue
                r = json.loads(out)
                r.update(model=name, setup=setup, profile_s=prof_s)
                keep(r)
                chosen = next(x for x in r["rows"] if "chosen" in x["placement"])
                print(f"{name:14} {setup:9} chosen {chosen['placement']:28} "
                      f"{chosen['measured_ms']:8.2f} ms (pred {chosen['predicted_ms']:8.2f}) "
                      f"/best single {r['chosen_over_best_single']} /capability "
                      f"{r['chosen_over_capability']:.3f} profile {prof_s:.1f}s", flush=True)
    if args.out:
        write(rows, Path(args.out))


def write(rows, out):
    ok = [r for r in rows if "error" not in r]
    errs = [abs(x["error"]) for r in ok for x in r["rows"] if "chosen" in x["placement"]]
    all_errs = [abs(x["error"]) for r in ok for x in r["rows"]]
    singles = [r["chosen_over_best_single"] for r in ok if r["chosen_over_best_single"]]
    lines = [
        "# Placement by cost, measured",
        "",
        "Written by `python3 scripts/reports/cost_matrix.py CLEAVE --out docs/cost-placement.md`: for each",
        "model and setup, `cleave measure` then `cleave bench --objective latency` (interleaved",
        "rounds, medians; each engine on one thread). `vs single` is the chosen placement's",
        "measured latency over the fastest single device that runs the whole model, `vs capability`",
        "over the capability placement (nnapi first). Error is (measured − predicted) / measured.",
        "",
        f"Chosen placements: {len(errs)}; worst `vs single` {max(singles):.3f}; "
        f"median |error| of the chosen {statistics.median(errs) * 100:.1f} %, "
        f"of every placement timed {statistics.median(all_errs) * 100:.1f} %."
        if errs and singles else "",
        "",
        "| model | setup | chosen | parts | predicted ms | measured ms | error | vs single | capability parts | vs capability | profile s |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['setup']} | {r['error']} |||||||||")
            continue
        c = next(x for x in r["rows"] if "chosen" in x["placement"])
        cap = next((x for x in r["rows"] if "capability" in x["placement"]), c)
        vs = r["chosen_over_best_single"]
        lines.append(
            f"| {r['model']} | {r['setup']} | {c['placement']} | {c['parts']} | "
            f"{c['predicted_ms']:.2f} | {c['measured_ms']:.2f} | {c['error'] * 100:.1f} % | "
            f"{vs:.3f} | {cap['parts']} | {r['chosen_over_capability']:.3f} | {r['profile_s']:.1f} |"
            if vs else
            f"| {r['model']} | {r['setup']} | {c['placement']} | {c['parts']} | "
            f"{c['predicted_ms']:.2f} | {c['measured_ms']:.2f} | {c['error'] * 100:.1f} % | "
            f"none runs it all | {cap['parts']} | {r['chosen_over_capability']:.3f} | {r['profile_s']:.1f} |")
    out.write_text("\n".join(lines) + "\n")
    print("wrote", out)


if __name__ == "__main__":
    sys.exit(main())
