#!/usr/bin/env python3
"""Put ONNX Runtime's mobile usability checker and `cleave query` side by side on the light
models, for the NNAPI, CoreML NeuralNetwork and CoreML MLProgram tables; write docs/ep-coverage.md.

ORT's numbers come from its own command line (python -m
onnxruntime.tools.check_onnx_model_mobile_usability MODEL), read from its log. cleave's come from
`cleave query MODEL --devices EP,cpu --optimize basic --json`, by op type alone
(--no-constraints, as ORT judges) in parts that must be connected (the default) and with
--allow-disconnected, and once more with the profiles' constraints checked.

The models are the light models twice: the fetched originals, which make every weight with a
ConstantOfShape node (both tools fold them at the basic level, cleave on a real engine, and
merge the branches that identical constant weights make identical, ORT's common subexpression
elimination), and the randomised copies (scripts/testdata/randomize_light.py): the same graphs with
random initializers, where no two branches are alike.

    python3 scripts/reports/ep_coverage.py [--cleave PATH] [--out docs/ep-coverage.md] [MODEL ...]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
LIGHT = ["light_bvlc_alexnet", "light_densenet121", "light_inception_v1", "light_inception_v2", "light_resnet50",
         "light_shufflenet", "light_squeezenet", "light_vgg19", "light_zfnet512"]
# ORT's log names → cleave's profiles.
EPS = {"NNAPI": "nnapi", "CoreML NeuralNetwork": "coreml", "CoreML MLProgram": "coreml-mlprogram"}


def ort_check(model: pathlib.Path) -> dict[str, dict]:
    """Per device profile name: parts, supported, total, unsupported op types (first pass)."""
    log = subprocess.run([sys.executable, "-m", "onnxruntime.tools.check_onnx_model_mobile_usability", str(model)],
                         capture_output=True, text=True, check=True)
    return parse_ort_log(log.stdout + log.stderr)


def parse_ort_log(text: str) -> dict[str, dict]:
    out, ep = {}, None
    for line in text.splitlines():
        m = re.search(r"Checking (NNAPI|CoreML NeuralNetwork|CoreML MLProgram)$", line)
        if m:
            ep = EPS[m.group(1)]
            continue
        if ep is None or ep in out and out[ep].get("done"):
            continue
        m = re.search(r"(\d+) partitions with a total of (\d+)/(\d+) nodes", line)
        if m:
            out[ep] = {"parts": int(m.group(1)), "supported": int(m.group(2)), "total": int(m.group(3)), "unsupported": set()}
            continue
        m = re.search(r"Unsupported ops: (.*)$", line)
        if m and ep in out:
            out[ep]["unsupported"] = set(m.group(1).strip().split(","))
        if "Model should perform well with" in line and ep in out:
            out[ep]["done"] = True
    return out


def cleave_query(cleave: str, model: pathlib.Path, ep: str, *flags: str) -> dict:
    cmd = [cleave, "query", str(model), "--devices", f"{ep},cpu", "--optimize", "basic", "--json", *flags]
    q = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    return next(c for c in q["coverage"] if c["device"] == ep)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target"))
    ap.add_argument("--cleave", default=str(pathlib.Path(target) / "debug" / "cleave"))
    ap.add_argument("--data", type=pathlib.Path, default=pathlib.Path(os.environ.get("CLEAVE_TEST_DATA", pathlib.Path.home() / ".cache/cleave/test-data")),
                    help="the test data folder; its light/ (originals) and light-random/ are read")
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / "docs" / "ep-coverage.md")
    ap.add_argument("models", nargs="*", default=LIGHT)
    args = ap.parse_args()

    rows, problems = [], []
    for kind, name in [(k, n) for k in ("light", "light-random") for n in args.models]:
        model = args.data / kind / f"{name}.onnx"
        ort = ort_check(model)
        for ep in EPS.values():
            o = ort[ep]
            conn = cleave_query(args.cleave, model, ep, "--no-constraints")
            disc = cleave_query(args.cleave, model, ep, "--no-constraints", "--allow-disconnected")
            checked = cleave_query(args.cleave, model, ep, "--allow-disconnected")
            same = set(conn["unsupported_ops"]) == o["unsupported"]
            if not same:
                problems.append(f"{kind}/{name} {ep}: unsupported ops differ: ORT {sorted(o['unsupported'])}, cleave {conn['unsupported_ops']}")
            if len(disc["parts"]) > o["parts"]:
                problems.append(f"{kind}/{name} {ep}: cleave --allow-disconnected gives {len(disc['parts'])} parts, ORT {o['parts']}")
            label = name.removeprefix("light_") + (" (randomised)" if kind == "light-random" else "")
            rows.append((label, ep, o, conn, disc, checked, same))
            print(f"{kind:12} {name:20} {ep:17} ORT {o['parts']:>3} parts {o['supported']}/{o['total']}   cleave {len(conn['parts'])}/{len(disc['parts'])} parts {conn['nodes_on_device']}/{conn['nodes_total']}", flush=True)

    lines = [
        "# EP coverage: ONNX Runtime's usability checker vs `cleave query`",
        "",
        "Generated by `scripts/reports/ep_coverage.py`; do not edit. Models: the light models as fetched",
        "(`~/.cache/cleave/test-data/light`, every weight made by a ConstantOfShape node) and their",
        "randomised copies (`light-random`, weights as random initializers). ORT: `python -m onnxruntime.tools.check_onnx_model_mobile_usability`",
        "(its first pass, BASIC optimizations). cleave: `cleave query MODEL --devices EP,cpu --optimize basic",
        "--no-constraints` (op types alone, as ORT judges), parts connected (default) and with",
        "`--allow-disconnected`; the last column checks the profiles' constraints as well.",
        "",
        "| model | EP | ORT parts | ORT nodes | cleave parts | cleave parts, disconnected | cleave nodes | unsupported op types (ORT = cleave) | cleave nodes, constraints checked |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for name, ep, o, conn, disc, checked, same in rows:
        unsupported = ", ".join(sorted(o["unsupported"])) or "none"
        mark = "" if same else f" ≠ cleave {', '.join(conn['unsupported_ops'])}"
        lines.append(f"| {name} | {ep} | {o['parts']} | {o['supported']}/{o['total']} | {len(conn['parts'])} | {len(disc['parts'])} | "
                     f"{conn['nodes_on_device']}/{conn['nodes_total']} | {unsupported}{mark} | {checked['nodes_on_device']}/{checked['nodes_total']} |")
    totals = [f"{name} {ep}: ORT {o['total']}, cleave {conn['nodes_total']}" for name, ep, o, conn, *_ in rows if o["total"] != conn["nodes_total"]]
    lines += [
        "",
        "Differences found (unsupported op types not equal, or more cleave parts than ORT's with",
        "`--allow-disconnected`): " + ("none." if not problems else ""),
        *[f"- {p}" for p in problems],
        "",
        "Node totals: " + ("equal in every row." if not totals else "they differ in these rows:"),
        *[f"- {t}" for t in totals],
        "",
        "Notes:",
        "- Both count nodes after basic optimizations: constant folding, Identity/Dropout removal,",
        "  BatchNormalization folded into Conv, and a Conv followed by a per-channel Mul or Add folded",
        "  into it (ORT's ConvMulFusion/ConvAddFusion; densenet121 and inception_v2 write BatchNorm's",
        "  affine part that way, 118 and 138 nodes).",
        "- The originals make every weight with a ConstantOfShape node. Both fold them at the basic",
        "  level: cleave runs every node computed from constants alone once on a real engine (ONNX",
        "  Runtime, else tract) and keeps the results as initializers. Their weights are constant-valued,",
        "  so some branches compute the same thing from equal weights; both merge those (common",
        "  subexpression elimination: inception_v1 138 nodes, not the randomised copy's 142), after which",
        "  some BatchNorms read a Conv that has two readers and stay (inception_v2, 6 on coreml-mlprogram).",
        "- ORT's checker groups supported nodes in topological waves that need not be connected, so its",
        "  count compares with `--allow-disconnected`; connected parts can only be as many or more.",
        "- The tables are read as ORT reads them: CoreML NeuralNetwork's row `ai.onnx.ReduceSum` (no",
        "  ':') is ignored by both, and MLProgram's `Argmax` matches no ArgMax node in either.",
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".md.tmp")
    tmp.write_text("\n".join(lines))
    tmp.replace(args.out)
    print(f"wrote {args.out}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
