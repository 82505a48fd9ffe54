"""Regenerate the bundled example models (small, seeded, opset 17 / IR version 8).

    python3 examples/make_examples.py

tiny_cnn.onnx        a small CNN with a residual add, random weights: the README's example
instance_norm.onnx   ONE's Net_InstanceNorm_003 shape (ReduceMean, Sub, Mul, ReduceMean, Add eps,
                     Pow 0.5, Div, Mul gamma, Add beta)
"""
import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = pathlib.Path(__file__).resolve().parent
OPSET = [helper.make_opsetid("", 17)]


def save(graph, name):
    model = helper.make_model(graph, opset_imports=OPSET, producer_name="cleave-examples")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(HERE / name))


def tiny_cnn(rng):
    def w(name, *shape, scale=None):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        s = scale if scale is not None else np.sqrt(2.0 / fan_in)
        return numpy_helper.from_array((rng.standard_normal(shape) * s).astype(np.float32), name)

    inits = [
        w("conv1.w", 8, 3, 3, 3), w("conv1.b", 8, scale=0.1),
        w("conv2.w", 8, 8, 3, 3), w("conv2.b", 8, scale=0.1),
        w("conv3.w", 8, 8, 1, 1), w("conv3.b", 8, scale=0.1),
        w("fc.w", 10, 8), w("fc.b", 10, scale=0.1),
    ]
    nodes = [
        helper.make_node("Conv", ["input", "conv1.w", "conv1.b"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "conv2.w", "conv2.b"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "conv3.w", "conv3.b"], ["c3"], name="conv3"),
        helper.make_node("Add", ["c3", "r1"], ["sum"], name="residual"),
        helper.make_node("MaxPool", ["sum"], ["pool"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["pool"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "tiny_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 16, 16])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 10])],
        inits,
    )
    save(graph, "tiny_cnn.onnx")


def instance_norm(rng):
    c = 4
    inits = [
        numpy_helper.from_array(np.array(1e-5, dtype=np.float32), "eps"),
        numpy_helper.from_array(np.array(0.5, dtype=np.float32), "half"),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, (1, c, 1, 1)).astype(np.float32), "gamma"),
        numpy_helper.from_array(rng.normal(0, 0.1, (1, c, 1, 1)).astype(np.float32), "beta"),
    ]
    nodes = [
        helper.make_node("ReduceMean", ["input"], ["mean"], name="mean", axes=[2, 3], keepdims=1),
        helper.make_node("Sub", ["input", "mean"], ["centered"], name="sub"),
        helper.make_node("Mul", ["centered", "centered"], ["sq"], name="square"),
        helper.make_node("ReduceMean", ["sq"], ["var"], name="variance", axes=[2, 3], keepdims=1),
        helper.make_node("Add", ["var", "eps"], ["var_eps"], name="add_eps"),
        helper.make_node("Pow", ["var_eps", "half"], ["std"], name="sqrt"),
        helper.make_node("Div", ["centered", "std"], ["normed"], name="div"),
        helper.make_node("Mul", ["normed", "gamma"], ["scaled"], name="mul_gamma"),
        helper.make_node("Add", ["scaled", "beta"], ["output"], name="add_beta"),
    ]
    graph = helper.make_graph(
        nodes, "instance_norm",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, c, 8, 8])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, c, 8, 8])],
        inits,
    )
    save(graph, "instance_norm.onnx")


if __name__ == "__main__":
    rng = np.random.default_rng(7)
    tiny_cnn(rng)
    instance_norm(rng)
    for p in sorted(HERE.glob("*.onnx")):
        print(f"{p.name}: {p.stat().st_size} bytes")
