#!/usr/bin/env python3
"""Regenerate the built-in profiles nnapi, coreml and coreml-mlprogram from ONNX Runtime's
published execution-provider operator tables.

The onnxruntime wheel ships the tables its usability checker reads, under
onnxruntime/tools/mobile_helpers/*.md. This script reads them from the installed package (the
default), from a folder, or straight from a downloaded wheel (.whl), and writes
crates/device/src/profiles/{nnapi,coreml,coreml-mlprogram}.toml.

Rows are read exactly as ORT's checker reads them (a '|'-table row with two cells whose first
cell holds 'domain:op'), so both agree on which op types exist, typos included. Each note is
cut into sentences; a sentence that the profile language can express becomes a constraint (and
is kept as a comment), any other sentence stays in the op's `note`, which `cleave query` prints.

    python3 scripts/gen/ep_profiles.py [--from DIR_OR_WHEEL] [--out crates/device/src/profiles]
"""
from __future__ import annotations

import argparse
import pathlib
import re
import sys
import zipfile

TABLES = {
    "nnapi": ("nnapi_supported_ops.md", "Android NNAPI (ONNX Runtime NNAPI execution provider)"),
    "coreml": ("coreml_supported_neuralnetwork_ops.md", "Apple CoreML, NeuralNetwork format (ONNX Runtime CoreML execution provider)"),
    "coreml-mlprogram": ("coreml_supported_mlprogram_ops.md", "Apple CoreML, MLProgram format (ONNX Runtime CoreML execution provider)"),
}

# Conditions that apply to every op of an EP. NNAPI runs static shapes only; ORT's checker gives
# CoreML a maximum input rank of 5 (usability_checker.py, check_coreml_partitions).
DEFAULTS = {
    "nnapi": {"static_shape": True},
    "coreml": {"max_rank": 5},
    "coreml-mlprogram": {"max_rank": 5},
}

# "All quantization scales and zero points should be constant": their input positions.
QUANT_PARAMS = {
    "DequantizeLinear": [1, 2],
    "QuantizeLinear": [1, 2],
    "QLinearConv": [1, 2, 4, 5, 6, 7],
    "QLinearMatMul": [1, 2, 4, 5, 6, 7],
    "QLinearAdd": [1, 2, 4, 5, 6, 7],
    "QLinearAveragePool": [1, 2, 3, 4],
    "QLinearSigmoid": [1, 2, 3, 4],
}

# Weights (and bias) of the ops whose note says so, by op.
WEIGHTS = {"Conv": [1, 2], "ConvTranspose": [1, 2], "QLinearConv": [3, 8]}


def rule(pattern):
    def wrap(f):
        RULES.append((re.compile(pattern, re.IGNORECASE), f))
        return f
    return wrap


RULES = []

# Each rule returns the constraint fields a sentence means for an op, or None when it does not
# apply to that op (the sentence then stays a note).
rule(r"^Only 2D (Pool|Conv|Resize) is supported")(lambda op: {"ranks": [4]})
rule(r"^Only 1D/2D Conv is supported")(lambda op: {"ranks": [3, 4]})
rule(r"^4D input\.?$")(lambda op: {"ranks": [4]})
rule(r"^Weights? and bias (should|must) be constant")(lambda op: {"const_inputs": WEIGHTS.get(op)} if op in WEIGHTS else None)
rule(r"^Bias if provided must be constant")(lambda op: {"const_inputs": [2]} if op == "Conv" else None)
rule(r"^Input B (should|must) be constant")(lambda op: {"const_inputs": [1]})
rule(r"^All quantization scales and zero points should be constant")(lambda op: {"const_inputs": QUANT_PARAMS[op]} if op in QUANT_PARAMS else None)
rule(r"^Only constant mode and last two dim padding")(lambda op: {"attrs": {"mode": ["constant"]}, "note": "Only padding of the last two dims is supported."})
rule(r"^Only constant mode Pad")(lambda op: {"attrs": {"mode": ["constant"]}})
rule(r"^Input pads and constant_value should be constant")(lambda op: {"const_inputs": [1, 2]})
rule(r"^If provided, axes should be constant")(lambda op: {"const_inputs": [3]})
rule(r"^Input axes should be constant")(lambda op: {"const_inputs": [1]})
rule(r"^Input split should be constant if provided")(lambda op: {"const_inputs": [1]})
rule(r"^If provided, `splits` must be constant")(lambda op: {"const_inputs": [1]})
rule(r"^Only DCR mode DepthToSpace")(lambda op: {"attrs": {"mode": ["DCR"]}})
rule(r"^`coordinate_transformation_mode` == `asymmetric`")(lambda op: {"attrs": {"coordinate_transformation_mode": ["asymmetric"]}, "require_attrs": ["coordinate_transformation_mode"]})
rule(r"^`mode` == `linear` or `nearest`")(lambda op: {"attrs": {"mode": ["linear", "nearest"]}})
rule(r"^`nearest_mode` == `floor`")(lambda op: {"attrs": {"nearest_mode": ["floor"]}, "require_attrs": ["nearest_mode"]})
rule(r"^`exclude_outside` == false")(lambda op: {"attrs": {"exclude_outside": [0]}})
rule(r"^`scales` or `sizes` must be constant")(lambda op: {"const_inputs": [2, 3]})
rule(r"^Attribute `start` with non-default value is not supported")(lambda op: {"attrs": {"start": [0]}})
rule(r"^Attribute `end` is not supported")(lambda op: {"attrs": {"end": []}})
rule(r"^Inputs `starts`, `ends`, `axes`, and `steps` should be constant")(lambda op: {"const_inputs": [1, 2, 3, 4]})
rule(r"^starts/ends/axes/steps must be constant initializers")(lambda op: {"const_inputs": [1, 2, 3, 4]})
rule(r"^Only supports cases when both inputs are fp32")(lambda op: {"dtypes": ["float32"]})
rule(r"^Both inputs must be bool")(lambda op: {"dtypes": ["bool"]})
rule(r"^Input slope should be constant")(lambda op: {"const_inputs": [1]})
rule(r"^batch_dims must be 0")(lambda op: {"attrs": {"batch_dims": [0]}})
rule(r"^output_shape is not supported")(lambda op: {"attrs": {"output_shape": []}})
rule(r"^padding_type of SAME_UPPER/SAME_LOWER is not supported")(lambda op: {"attrs": {"auto_pad": ["NOTSET", "VALID"]}})


def read_tables(source: pathlib.Path | None) -> dict[str, str]:
    """File name → text of each table."""
    names = [f for f, _ in TABLES.values()]
    if source is None:
        import onnxruntime

        source = pathlib.Path(onnxruntime.__file__).parent / "tools" / "mobile_helpers"
    if source.suffix == ".whl":
        with zipfile.ZipFile(source) as z:
            return {n: z.read(f"onnxruntime/tools/mobile_helpers/{n}").decode() for n in names}
    return {n: (source / n).read_text() for n in names}


def rows(text: str):
    """(domain:op, note) as ORT's _SupportedOpsChecker reads them; plus rows it skips."""
    ops, skipped = [], []
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        pieces = line.strip().split("|")
        if len(pieces) != 4:
            continue
        if ":" in pieces[1]:
            ops.append((pieces[1], pieces[2]))
        elif pieces[1] and not set(pieces[1]) <= {"-"} and pieces[1] != "Operator":
            skipped.append(pieces[1])
    return ops, skipped


def sentences(note: str) -> list[str]:
    out = []
    # The CoreML Resize note runs "== false" into the next sentence without a full stop.
    for chunk in note.replace("== false `", "== false. `").split("<br/>"):
        # Split after a full stop followed by a capital, not inside `a.b` or "e.g.".
        out += [s.strip() for s in re.split(r"(?<=\.)\s+(?=[A-Z`])", chunk) if s.strip()]
    return out


def merge(into: dict, add: dict):
    for k, v in add.items():
        if k == "attrs":
            into.setdefault("attrs", {}).update(v)
        elif k in ("const_inputs", "require_attrs"):
            into[k] = sorted(set(into.get(k, [])) | set(v)) if k == "const_inputs" else into.get(k, []) + v
        else:
            into[k] = v


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(v)


def profile(name: str, file: str, description: str, text: str) -> str:
    ops, skipped = rows(text)
    out = [
        f"# {description}.",
        f"# GENERATED by scripts/gen/ep_profiles.py from onnxruntime's tools/mobile_helpers/{file}; do not edit.",
        "# Notes the profile language expresses are checked (the sentence is kept as a comment);",
        "# the others stay in `note`, printed by `cleave query` as unchecked caveats.",
    ]
    for s in skipped:
        out.append(f"# The row '{s}' has no 'domain:op' form, so ORT's checker ignores it; so does this profile.")
    out += [f'name = "{name}"', f"description = {toml_value(description)}", "", "[defaults]"]
    out += [f"{k} = {toml_value(v)}" for k, v in DEFAULTS[name].items()]
    out += ["", "[ops]"]
    for domain_op, note in ops:
        domain, op = domain_op.split(":", 1)
        key = op if domain == "ai.onnx" else f'"{domain}::{op}"'
        c, checked, unchecked = {}, [], []
        for s in sentences(note):
            fields = next((f(op) for r, f in RULES if r.search(s) and f(op) is not None), None)
            if fields is None:
                unchecked.append(s)
            else:
                fields = dict(fields)
                if "note" in fields:
                    unchecked.append(fields.pop("note"))
                merge(c, fields)
                checked.append(s)
        if checked:
            out.append("# checked: " + " ".join(checked))
        if op == "Argmax":
            out.append("# sic: the table spells it Argmax, so neither ORT's checker nor this profile matches ArgMax.")
        if unchecked:
            c["note"] = " ".join(unchecked)
        out.append(f"{key} = {toml_value(c) if c else '{}'}")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from", dest="source", type=pathlib.Path, help="folder holding the .md tables, or an onnxruntime .whl (default: the installed onnxruntime)")
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parent.parent.parent / "crates/device/src/profiles")
    args = ap.parse_args()
    tables = read_tables(args.source)
    for name, (file, description) in TABLES.items():
        path = args.out / f"{name}.toml"
        tmp = path.with_suffix(".toml.tmp")
        tmp.write_text(profile(name, file, description, tables[file]))
        tmp.replace(path)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
