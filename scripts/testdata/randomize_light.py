"""Write seeded randomised copies of the ONNX 'light' models.

The light models carry their weights as ConstantOfShape nodes filled with one value (0.02), so
every channel is alike and the output hardly depends on the input: a parity test on them passes
with wrong wiring. Each weight generator, and every float initializer, becomes a random
initializer drawn for its role (He-scaled Conv/Gemm weights, BatchNorm statistics near 1 and 0),
so activations stay finite and every channel differs.

usage: python3 randomize_light.py SRC_DIR DST_DIR [--seed N]
"""
import argparse
import pathlib
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def consumers(graph):
    out = {}
    for node in graph.node:
        for slot, name in enumerate(node.input):
            out.setdefault(name, []).append((node, slot))
    return out


def role_of(name, uses, shape):
    """Pick a distribution from how the tensor is consumed."""
    node, slot = uses[name][0] if uses.get(name) else (None, None)
    if node is not None and node.op_type == "Reshape" and slot == 0:
        # A weight reshaped on its way to a Gemm: out-features first, the rest is fan-in.
        return ("he", int(np.prod(shape[1:])) if len(shape) > 1 else 1)
    if node is not None and node.op_type == "Unsqueeze":
        inner = uses.get(node.output[0], [])
        node, slot = inner[0] if inner else (None, None)
        if node is not None:
            return "scale" if node.op_type == "Mul" else "shift"
    if node is None:
        return "scale"
    op = node.op_type
    if op == "Conv" and slot == 1:
        return ("he", int(np.prod(shape[1:])) if len(shape) > 1 else 1)
    if op == "Gemm" and slot == 1:
        trans_b = any(a.name == "transB" and a.i == 1 for a in node.attribute)
        fan_in = shape[1] if trans_b else shape[0]
        return ("he", int(fan_in))
    if op == "BatchNormalization":
        return "scale" if slot in (1, 4) else "shift"
    if op in ("Conv", "Gemm") and slot == 2:
        return "shift"
    return "scale"


def draw(rng, role, shape):
    if isinstance(role, tuple):
        return rng.normal(0.0, np.sqrt(2.0 / max(role[1], 1)), shape)
    if role == "shift":
        return rng.normal(0.0, 0.1, shape)
    return rng.uniform(0.5, 1.5, shape)


def randomize(model, rng):
    graph = model.graph
    uses = consumers(graph)
    inits = {t.name: t for t in graph.initializer}
    graph_inputs = {v.name for v in graph.input}
    listed_as_input = model.ir_version < 4

    new_nodes = []
    replaced = 0
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input and node.input[0] in inits:
            shape = [int(d) for d in numpy_helper.to_array(inits[node.input[0]])]
            name = node.output[0]
            value = draw(rng, role_of(name, uses, shape), shape).astype(np.float32)
            graph.initializer.append(numpy_helper.from_array(value, name))
            if listed_as_input and name not in graph_inputs:
                graph.input.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, shape))
            replaced += 1
            continue
        new_nodes.append(node)
    del graph.node[:]
    graph.node.extend(new_nodes)

    # Float initializers that were already there are just as uniform: redraw them too.
    for t in list(graph.initializer):
        if t.data_type == onnx.TensorProto.FLOAT and uses.get(t.name):
            shape = list(t.dims)
            value = draw(rng, role_of(t.name, uses, shape), shape).astype(np.float32)
            t.CopyFrom(numpy_helper.from_array(value, t.name))

    # Shape tensors that only fed the removed generators are dead now.
    still_read = {name for node in graph.node for name in node.input}
    dead = [t for t in graph.initializer if t.name not in still_read and t.name.endswith("__SHAPE")]
    for t in dead:
        graph.initializer.remove(t)
        for v in list(graph.input):
            if v.name == t.name:
                graph.input.remove(v)
    return replaced


def calibrate_batchnorm(model, rng):
    """Set each BatchNormalization's running mean and variance to the statistics its input
    really has on random data, so it normalises: activations stay near unit scale through
    the whole net, as in a trained model. Without this, random statistics let activations
    grow to ~1e4, and float rounding differences between engines (a Conv with its BatchNorm
    folded in, or not) exceed any sensible tolerance near zero.

    BatchNorms are calibrated in waves: those with no uncalibrated BatchNorm upstream first.
    """
    import onnxruntime as ort

    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output}
    bns = [n for n in graph.node if n.op_type == "BatchNormalization"]
    upstream = {}

    def bn_above(name, seen):
        node = producer.get(name)
        found = set()
        stack = [node] if node is not None else []
        while stack:
            n = stack.pop()
            if id(n) in seen:
                continue
            seen.add(id(n))
            if n.op_type == "BatchNormalization":
                found.add(n.name or n.output[0])
            stack.extend(producer[i] for i in n.input if i in producer)
        return found

    for bn in bns:
        upstream[bn.name or bn.output[0]] = bn_above(bn.input[0], set())
    inits = {t.name: t for t in graph.initializer}
    done = set()
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    feeds = None
    waves = 0
    while len(done) < len(bns):
        wave = [bn for bn in bns if (bn.name or bn.output[0]) not in done and upstream[bn.name or bn.output[0]] <= done]
        probe = onnx.ModelProto()
        probe.CopyFrom(model)
        for bn in wave:
            probe.graph.output.append(onnx.helper.make_empty_tensor_value_info(bn.input[0]))
        sess = ort.InferenceSession(probe.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        if feeds is None:
            feeds = {}
            for i in sess.get_inputs():
                shape = [d if isinstance(d, int) else 1 for d in i.shape]
                feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
        values = sess.run([bn.input[0] for bn in wave], feeds)
        for bn, x in zip(wave, values):
            axes = tuple(i for i in range(x.ndim) if i != 1)
            mean, var = x.mean(axis=axes), x.var(axis=axes)
            for name, value in ((bn.input[3], mean), (bn.input[4], var)):
                inits[name].CopyFrom(numpy_helper.from_array(value.astype(np.float32), name))
            done.add(bn.name or bn.output[0])
        waves += 1
    return waves


def upstream_weighted(graph, name):
    """The last Conv/Gemm at or above `name` along first inputs, with its weight and bias names."""
    producer = {o: n for n in graph.node for o in n.output}
    node = producer.get(name)
    while node is not None:
        if node.op_type in ("Conv", "Gemm"):
            return node
        if node.op_type not in ("Relu", "GlobalAveragePool", "AveragePool", "Flatten", "Reshape", "Dropout"):
            return None
        node = producer.get(node.input[0])
    return None


def calibrate_logits(model, rng, target_std=2.0):
    """Rescale the layer before a final Softmax so its logits have about `target_std`.

    Random BatchNorm statistics do not normalise, so deep residual nets grow their activations
    and the Softmax saturates to one-hot: its output then ignores the input and hides wiring
    bugs. The layers that feed it are positively homogeneous, so scaling one weight and bias
    scales the logits.
    """
    import onnxruntime as ort

    graph = model.graph
    softmaxes = [n for n in graph.node if n.op_type == "Softmax" and n.output[0] in {o.name for o in graph.output}]
    if not softmaxes:
        return None
    logits = softmaxes[0].input[0]
    layer = upstream_weighted(graph, logits)
    if layer is None:
        return None
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.append(onnx.helper.make_empty_tensor_value_info(logits))
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(probe.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    std = float(np.std(sess.run([logits], feeds)[0]))
    if not np.isfinite(std) or std == 0.0:
        raise SystemExit(f"error: logits of {graph.name} are {std}; the randomisation is broken")
    factor = target_std / std
    inits = {t.name: t for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    for name in layer.input[1:3]:
        if name not in inits and name in producer and producer[name].op_type == "Reshape":
            name = producer[name].input[0]
        if name in inits:
            arr = numpy_helper.to_array(inits[name]) * np.float32(factor)
            inits[name].CopyFrom(numpy_helper.from_array(arr.astype(np.float32), name))
    return std


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=pathlib.Path)
    ap.add_argument("dst", type=pathlib.Path)
    ap.add_argument("--seed", type=int, default=20261122)
    args = ap.parse_args()
    args.dst.mkdir(parents=True, exist_ok=True)
    models = sorted(args.src.glob("*.onnx"))
    if not models:
        sys.exit(f"error: no .onnx files in {args.src}")
    for i, path in enumerate(models):
        model = onnx.load(str(path))
        rng = np.random.default_rng(args.seed + i)
        n = randomize(model, rng)
        waves = calibrate_batchnorm(model, rng)
        std = calibrate_logits(model, rng)
        onnx.checker.check_model(model, full_check=True)
        out = args.dst / path.name
        tmp = out.with_suffix(".onnx.tmp")
        onnx.save(model, str(tmp))
        tmp.replace(out)
        note = f", BatchNorm statistics measured in {waves} runs" if waves else ""
        note += f", logits rescaled from std {std:.3g}" if std is not None else ""
        print(f"{path.name}: {n} weight generators replaced{note}")


if __name__ == "__main__":
    main()
