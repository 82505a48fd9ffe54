#!/usr/bin/env python3
"""OpenVINO beside cleave's own tables, on the test models; writes docs/openvino-coverage.md.

    python3 scripts/reports/openvino_report.py [--cleave PATH] [--data DIR] [--out FILE] [--latency M,M]

Per model (the randomised light models and the real-model corpus):
  1. nodes the built-in `myriad` table runs (`cleave query --devices myriad,cpu`), and nodes
     OpenVINO's CPU plugin runs by its own `query_model` (`cleave query --devices ov:CPU,cpu`),
     with how it was asked (the whole model, or each node alone where OpenVINO cannot read the
     whole);
  2. OpenVINO's HETERO plugin on the same question (`query_model(model, "HETERO:A,B")`,
     --hetero A,B, default CPU) against `cleave query --devices ov:A,ov:B`: on how many
     nodes both choose the same device;
  3. a seeded random split over `ov-CPU` (parts on OpenVINO) and `ort` (parts on ONNX
     Runtime) of the nodes OpenVINO runs (the rest on `ort`), `cleave verify --boundaries
     --reference ort`: every output and boundary tensor against ONNX Runtime on the whole
     model.
For the --latency models: `cleave measure --devices ov:CPU,ort,cpu` (OpenVINO, ONNX Runtime,
tract), then `cleave bench --objective latency`: the whole model on each engine, timed in
interleaved rounds in one process, and what the latency objective chose.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "python" / "cleave"))

import corpus  # noqa: E402  (the corpus' models, shapes and given inputs)
import openvino_query  # noqa: E402  (the question cleave asks, asked of HETERO here)

LIGHT = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
         "squeezenet", "vgg19", "zfnet512"]


def cleave_json(cleave, args):
    rc, out = corpus.run([cleave, *args, "--json", "--quiet"])
    if rc != 0:
        return None, corpus.last_line(out)
    return json.loads(out), None


def coverage(q, device):
    """Nodes on `device` of those placed (constant nodes, copied where read, left out), and
    its parts."""
    c = next(c for c in q["coverage"] if c["device"] == device)
    return q["counts"].get(device, 0), sum(q["counts"].values()), len(c["parts"])


def hetero_agreement(model, q, devices):
    """Nodes where OpenVINO's HETERO plugin (`query_model(model, "HETERO:A,B")`, each ONNX
    node taken at the OpenVINO op that makes its first kept output) and cleave's
    `--devices ov:A,ov:B` put the node on the same device."""
    import onnx
    import openvino as ov

    core = ov.Core()
    try:
        m_ov = core.read_model(str(model))
        affinity = core.query_model(m_ov, "HETERO:" + ",".join(devices))
    except RuntimeError:  # OpenVINO cannot read the model, or fails answering
        return "HETERO has no answer for the whole model"
    device_of = {}
    for op in m_ov.get_ordered_ops():
        for out in op.outputs():
            for name in out.get_names():
                device_of[name] = affinity.get(op.get_friendly_name())
    m = onnx.load(str(model), load_external_data=False)
    outputs = {(n.name or n.output[0]): [o for o in n.output if o] for n in m.graph.node}
    agree = total = 0
    for node in q["nodes"]:
        if node["device"] not in q["counts"]:
            continue  # a constant node, copied where read
        kept = [device_of[o] for o in outputs.get(node["name"], []) if o in device_of]
        if not kept:
            continue  # OpenVINO dropped its names (an identity it removed)
        mine = node["device"][len("ov-"):] if node["device"].startswith("ov-") else None
        total += 1
        agree += kept[0] == mine
    return f"{agree}/{total}"


def verify_split(cleave, model, shapes, tmp):
    import numpy as np

    shape_flags = [a for s in shapes for a in ("--shape", s)]
    input_flags = []
    for name, value in corpus.GIVEN.get(model.stem, {}).items():
        f = tmp / f"{model.stem}-{name}.npy"
        np.save(f, np.array(value, dtype=np.int64))
        input_flags += ["--input", f"{name}={f}"]
    # Each node OpenVINO runs goes to it or to ONNX Runtime at random (seeded); the rest to
    # ONNX Runtime.
    q, err = cleave_json(cleave, ["query", str(model), "--devices", "ov:CPU,ort"] + shape_flags)
    if q is None:
        return "query refused: " + err
    rng = random.Random(1)
    rules = [f"{n['name']}={rng.choice(['ov-CPU', 'ort'])}" for n in q["nodes"]
             if n["device"] == "ov-CPU"]
    part = tmp / f"{model.stem}.part"
    part.write_text("[partition]\nbackends=ov-CPU,ort\ndefault=ort\ncomply=opname\n\n[OPNAME]\n"
                    + "\n".join(rules) + "\n")
    work = tmp / model.stem
    rc, out = corpus.run([cleave, "partition", "--quiet", str(model), "--rules", str(part), "-o",
                          str(work)] + shape_flags)
    if rc != 0:
        return "partition refused: " + corpus.last_line(out)
    conn = work / f"{model.stem}.conn.json"
    parts = json.loads(conn.read_text())["parts"]
    on_ov = sum(1 for p in parts if p.get("engine") == "openvino:CPU")
    rc, out = corpus.run([cleave, "verify", "--quiet", str(model), str(conn), "--boundaries",
                          "--reference", "ort"] + shape_flags + input_flags)
    verdict = "pass" if rc == 0 else "FAIL"
    return f"{len(parts)} parts ({on_ov} on OpenVINO): {verdict}, {corpus.last_line(out)[8:].split(' within')[0]}"


def coverage_rows(cleave, data, tmp, hetero):
    models = [(data / "light-random" / f"light_{m}.onnx", []) for m in LIGHT]
    models += [(data / "corpus" / f"{name}.onnx", shapes) for name, _, _, shapes, _ in corpus.MODELS]
    rows = []
    for model, shapes in models:
        print(f"  {model.stem}", file=sys.stderr, flush=True)
        shape_flags = [a for s in shapes for a in ("--shape", s)]
        myriad, err = cleave_json(cleave, ["query", str(model), "--devices", "myriad,cpu"] + shape_flags)
        ov, err2 = cleave_json(cleave, ["query", str(model), "--devices", "ov:CPU,cpu"] + shape_flags)
        hetero_q, _ = cleave_json(cleave, ["query", str(model), "--devices",
                                           ",".join([*(f"ov:{d}" for d in hetero), "cpu"])]
                                  + shape_flags)
        if myriad is None or ov is None:
            rows.append(f"| {model.stem} | refused: {err or err2} | | | | |")
            continue
        mn, total, mp = coverage(myriad, "myriad")
        on, _, op = coverage(ov, "ov-CPU")
        asked = openvino_asked(model)
        rows.append(
            f"| {model.stem} | {total} | {mn}/{total}, {mp} parts | {on}/{total}, {op} parts ({asked}) "
            f"| {hetero_agreement(model, hetero_q, hetero) if hetero_q else 'cleave refused'} "
            f"| {verify_split(cleave, model, shapes, tmp)} |"
        )
    return rows


def openvino_asked(model):
    """How OpenVINO was asked: the whole model, or each node alone (it cannot read the whole,
    or fails answering for it)."""
    import openvino as ov

    try:
        core = ov.Core()
        core.query_model(core.read_model(str(model)), "CPU")
        return "whole model"
    except RuntimeError:
        return "node by node"


def latency_rows(cleave, data, names, tmp):
    rows = []
    for name in names:
        model = data / "light-random" / f"light_{name}.onnx"
        print(f"  latency {name}", file=sys.stderr, flush=True)
        costs = tmp / f"{name}-costs.json"
        rc, out = corpus.run([cleave, "measure", "--quiet", str(model), "--devices", "ov:CPU,ort,cpu",
                              "-o", str(costs)], timeout=1800)
        if rc != 0:
            rows.append(f"| {name} | profile failed: {corpus.last_line(out)} | | | | |")
            continue
        b, err = cleave_json(cleave, ["bench", str(model), "--devices", "ov:CPU,ort,cpu",
                                      "--objective", "latency", "--costs", str(costs)])
        if b is None:
            rows.append(f"| {name} | bench failed: {err} | | | | |")
            continue
        single = {}
        chosen = None
        for r in b["rows"]:
            for label in r["placement"].split(" = "):
                if label.startswith("all on "):
                    single[label[len("all on "):]] = r["measured_ms"]
            if r["placement"].startswith("chosen"):
                chosen = r
        devices = sorted({p["device"] for p in chosen["per_part"]}) if chosen else []
        ms = lambda d: f"{single[d]:.2f}" if d in single else "n/a"  # noqa: E731
        rows.append(
            f"| {name} | {ms('ov-CPU')} | {ms('ort')} | {ms('cpu')} "
            f"| {single['ort'] / single['ov-CPU']:.2f}× | {chosen['placement']}: {chosen['parts']} "
            f"part(s) on {', '.join(devices)}, {chosen['measured_ms']:.2f} ms |"
            if chosen and "ov-CPU" in single and "ort" in single else f"| {name} | {b['rows']} | | | | |"
        )
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target = os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target"))
    ap.add_argument("--cleave", default=os.path.join(target, "debug", "cleave"))
    ap.add_argument("--data", type=pathlib.Path,
                    default=pathlib.Path(os.environ.get("CLEAVE_TEST_DATA",
                                                        pathlib.Path.home() / ".cache/cleave/test-data")))
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / "docs" / "openvino-coverage.md")
    ap.add_argument("--latency", default="squeezenet,inception_v1,resnet50")
    ap.add_argument("--hetero", default="CPU",
                    help="OpenVINO devices for the HETERO comparison, e.g. GPU,CPU (default: CPU)")
    args = ap.parse_args()
    import openvino as ov

    with tempfile.TemporaryDirectory() as t:
        tmp = pathlib.Path(t)
        cov = coverage_rows(args.cleave, args.data, tmp, args.hetero.split(","))
        lat = latency_rows(args.cleave, args.data, [n for n in args.latency.split(",") if n], tmp)
    text = f"""# OpenVINO: its own answer beside cleave's tables, and as an engine

Generated by `scripts/reports/openvino_report.py` (OpenVINO {ov.get_version().split('-')[0]}, on a machine whose
only OpenVINO device is `CPU`); do not edit. See [openvino.md](openvino.md) for what the columns mean.

| model | nodes | `myriad` table | OpenVINO `CPU` query_model | HETERO:{args.hetero} and `--devices {",".join("ov:" + d for d in args.hetero.split(","))},cpu` agree | random split over ov-CPU + ort, verified against ONNX Runtime |
|---|---:|---|---|---|---|
{chr(10).join(cov)}

## Latency of the whole model, and what `--objective latency` picks

`cleave measure --devices ov:CPU,ort,cpu` then `cleave bench --objective latency`: each engine
on one thread, medians of interleaved rounds in one process, milliseconds.

| model | OpenVINO CPU | ONNX Runtime | tract | ORT / OpenVINO | latency objective chose |
|---|---:|---:|---:|---:|---|
{chr(10).join(lat)}
"""
    args.out.write_text(text)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
