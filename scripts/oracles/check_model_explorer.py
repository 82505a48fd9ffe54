#!/usr/bin/env python3
"""Checks cleave's Model Explorer overlay (stem.model-explorer.json) against Model Explorer
itself: MODEL is converted by Model Explorer's own adapter (model-explorer-onnx for ONNX, the
built-in flatbuffer adapter for TFLite), and every operator node of the main graph must have
one result in the overlay, under the id the adapter gave it, whose value names the node's op
(so a result keyed to the wrong node is seen). Prints one summary line; exits 1 on a mismatch.

    python3 scripts/oracles/check_model_explorer.py OUT/stem.model-explorer.json MODEL
"""
import json
import os
import re
import sys

# The TFLite adapter links TensorFlow, which talks on stderr at import.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def norm(op):
    """An op name without its domain ("com.microsoft::Gelu"), case or punctuation."""
    return re.sub(r"[^a-z0-9]", "", op.rsplit("::", 1)[-1].lower())


def main_graph_ops(model):
    """(id, op) of each operator node of the model's main graph, as Model Explorer shows it."""
    if model.endswith(".onnx"):
        from model_explorer_onnx.main import ONNXAdapter

        graph = ONNXAdapter().convert(model, {})["graphs"][0]
        # "[value] x": inputs, outputs and initializers; "(Capture)": the adapter's own node
        # for a Loop's or Scan's closed-over values.
        return [
            (n.id, n.label)
            for n in graph.nodes
            if not n.id.startswith("[value] ") and n.label != "(Capture)"
        ]
    from model_explorer.builtin_tflite_flatbuffer_adapter import BuiltinTfliteFlatbufferAdapter

    collection = BuiltinTfliteFlatbufferAdapter().convert(model, {})["graphCollections"][0]
    graph = collection.graphs[0]
    skip = {"GraphInputs", "GraphOutputs", "pseudo_const"}
    return [(n["id"], n["label"]) for n in graph["nodes"] if n["label"] not in skip]


def main():
    overlay_path, model = sys.argv[1], sys.argv[2]
    results = json.load(open(overlay_path))["results"]
    ops = main_graph_ops(model)
    bad = []
    for node_id, op in ops:
        r = results.get(node_id)
        if r is None:
            bad.append(f"node {node_id!r} ({op}) has no result")
            continue
        named = r["value"].rsplit(" · ", 1)[-1]
        if norm(named) != norm(op):
            bad.append(f"node {node_id!r} is a {op} in Model Explorer; the overlay says {r['value']!r}")
        if not re.fullmatch(r"#[0-9A-Fa-f]{6}", r.get("bgColor", "")):
            bad.append(f"node {node_id!r}: no colour")
    extra = set(results) - {i for i, _ in ops}
    if extra:
        bad.append(f"{len(extra)} results name no node of the main graph, e.g. {sorted(extra)[0]!r}")
    colours = {r["bgColor"] for r in results.values()}
    if bad:
        print(f"{overlay_path}: {len(bad)} mismatches with Model Explorer:", *bad[:10], sep="\n  ")
        sys.exit(1)
    print(f"model-explorer: {len(ops)} nodes of the main graph, each with its result; {len(colours)} colours")


if __name__ == "__main__":
    main()
