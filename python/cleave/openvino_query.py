"""What an OpenVINO device runs of a model, by OpenVINO's own ``Core.query_model``.

Run as ``python3 openvino_query.py MODEL DEVICE`` (the cleave binary carries this file and
runs it so), or call :func:`query`. Prints one JSON object: the OpenVINO version, and for
every named tensor of the model (a source node's output) whether the OpenVINO operations
that compute it from the named tensors before it are all supported on the device, with the
unsupported operations' types where not. OpenVINO splits one ONNX or TFLite node into
several of its own operations (a Conv with a bias is a Convolution and an Add); a node runs
on the device only when every one of them does, as in OpenVINO's HETERO plugin.

When OpenVINO cannot read the whole model (an ONNX op its front-end lacks, such as ``Det``),
or fails while answering for it, each node is asked alone, as a one-node model (this needs the
``onnx`` package); a node it cannot read is not supported.
"""

from __future__ import annotations

import json
import sys


def query(model_path: str, device: str) -> dict:
    import openvino as ov

    core = ov.Core()
    try:
        tensors = answer(core, core.read_model(model_path), device)
    except RuntimeError as e:
        # OpenVINO cannot read the model, or its transformations fail on it while answering.
        if not model_path.endswith(".onnx"):
            raise
        return {
            "openvino": ov.get_version(),
            "device": device,
            "whole_model": one_line(e),
            "tensors": per_node(core, model_path, device),
        }
    return {"openvino": ov.get_version(), "device": device, "tensors": tensors}


def one_line(e: BaseException) -> str:
    lines = [x.strip() for x in str(e).splitlines() if x.strip()]
    return lines[-1] if lines else type(e).__name__


def per_node(core, model_path: str, device: str) -> dict[str, list[str]]:
    """Each node of an ONNX model asked alone, as a model of that one node."""
    import os
    import tempfile

    import onnx
    from onnx import helper

    m = onnx.load(model_path)
    try:
        m = onnx.shape_inference.infer_shapes(m)
    except Exception:
        pass  # nodes whose input types stay unknown are refused below
    g = m.graph
    typed = {v.name: v for v in [*g.input, *g.value_info, *g.output]}
    weights = {t.name: t for t in g.initializer}
    verdict: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        single = os.path.join(tmp, "node.onnx")
        for node in g.node:
            names = [o for o in node.output if o]
            inputs, inits, unknown = [], [], []
            for x in dict.fromkeys(i for i in node.input if i):
                if x in weights:
                    inits.append(weights[x])
                elif x in typed and typed[x].type.HasField("tensor_type"):
                    inputs.append(typed[x])
                else:
                    unknown.append(x)
            if unknown:
                lacks = [f"{node.op_type} (the type of its input '{unknown[0]}' is unknown)"]
            else:
                outputs = [typed.get(o) or onnx.ValueInfoProto(name=o) for o in names]
                one = helper.make_model(
                    helper.make_graph([node], "node", inputs, outputs, inits),
                    opset_imports=m.opset_import,
                    ir_version=m.ir_version,
                )
                onnx.save(one, single)
                try:
                    part = core.read_model(single)
                    lacks = answer(core, part, device, every_op=True)
                except RuntimeError as e:
                    lacks = [f"{node.op_type} (OpenVINO cannot read it: {one_line(e)[:200]})"]
            for o in names:
                verdict[o] = lacks
    return verdict


def answer(core, model, device: str, every_op: bool = False):
    """Per named tensor, the unsupported ops that compute it; with ``every_op``, the
    unsupported ops of the whole (one-node) model as one list."""
    supported = set(core.query_model(model, device))
    if every_op:
        return sorted(
            {
                op.get_type_name()
                for op in model.get_ordered_ops()
                if op.get_type_name() not in ("Parameter", "Result")
                and op.get_friendly_name() not in supported
            }
        )
    verdict: dict[str, list[str]] = {}
    memo: dict[int, list[str]] = {}

    def cone_refusals(op) -> list[str]:
        """Unsupported ops in ``op``'s decomposition: it and its unnamed producers."""
        key = id(op)
        if key in memo:
            return memo[key]
        memo[key] = []
        bad = [] if op.get_friendly_name() in supported else [op.get_type_name()]
        for inp in op.inputs():
            src = inp.get_source_output()
            if src.get_names():
                continue  # another node's tensor (or a graph input or a weight)
            bad.extend(cone_refusals(src.get_node()))
        memo[key] = sorted(set(bad))
        return memo[key]

    for op in model.get_ordered_ops():
        if op.get_type_name() in ("Parameter", "Result"):
            continue
        for out in op.outputs():
            for name in out.get_names():
                verdict[name] = cone_refusals(op)
    return verdict


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: openvino_query.py MODEL DEVICE", file=sys.stderr)
        return 2
    try:
        answer = query(argv[1], argv[2])
    except ImportError as e:
        print(f"the openvino package is not installed ({e})", file=sys.stderr)
        return 3
    except Exception as e:  # OpenVINO's own errors are RuntimeErrors with long texts
        print(" ".join(str(e).split()), file=sys.stderr)
        return 1
    json.dump(answer, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
