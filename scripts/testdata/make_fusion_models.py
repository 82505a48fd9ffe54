"""Hand-made ONNX graphs, with random weights, that each contain one rewrite pattern, or a near
miss that a legality condition must refuse. Writes OUTDIR/*.onnx and OUTDIR/expected.json:
for each model the devices and level to optimize with and the exact rewrite counts expected
(rewrites not listed must not apply).

    python3 scripts/testdata/make_fusion_models.py OUTDIR
"""
import json
import pathlib
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(7)
F = TensorProto.FLOAT


def w(name, *shape):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def const(name, value):
    return numpy_helper.from_array(np.asarray(value, dtype=np.float32), name)


def model(nodes, inputs, outputs, inits, opset=17):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, F, None) for n in outputs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(m).graph.output
    for o, i in zip(m.graph.output, inferred):
        o.type.CopyFrom(i.type)
    onnx.checker.check_model(m, full_check=True)
    return m


def conv(name, x, wname, y, bname=None, **attrs):
    ins = [x, wname] + ([bname] if bname else [])
    return helper.make_node("Conv", ins, [y], name=name, **attrs)


def group_conv(order=(0, 1, 2), dilations=(1, 1, 1)):
    nodes = [helper.make_node("Split", ["x", "sizes"], ["s0", "s1", "s2"], name="split", axis=1)]
    inits = [numpy_helper.from_array(np.array([4, 4, 4], np.int64), "sizes")]
    for i in range(3):
        nodes.append(conv(f"conv{i}", f"s{i}", f"W{i}", f"c{i}", f"B{i}", kernel_shape=[3, 3], pads=[dilations[i]] * 4, dilations=[dilations[i]] * 2))
        inits += [w(f"W{i}", 5, 4, 3, 3), w(f"B{i}", 5)]
    nodes.append(helper.make_node("Concat", [f"c{i}" for i in order], ["y"], name="concat", axis=1))
    return model(nodes, [("x", [1, 12, 8, 8])], ["y"], inits)


def identity_power(mul=1.0, add_shape=(1,)):
    nodes = [
        helper.make_node("Pow", ["x", "one"], ["p"], name="pow"),
        helper.make_node("Mul", ["mulc", "p"], ["m"], name="mul"),
        helper.make_node("Add", ["m", "zero"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"], name="relu"),
    ]
    inits = [const("one", [1.0]), const("mulc", [mul]), const("zero", np.zeros(add_shape))]
    return model(nodes, [("x", [1, 3, 4, 4])], ["y"], inits)


def batchnorm(shared=False):
    nodes = [conv("conv", "x", "W", "c", "B", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["b"], name="bn", epsilon=1e-3),
             helper.make_node("Relu", ["b"], ["y"], name="relu")]
    outputs = ["y"]
    if shared:
        nodes.append(helper.make_node("Sigmoid", ["c"], ["z"], name="other_reader"))
        outputs.append("z")
    var = np.abs(rng.standard_normal(6)).astype(np.float32) + 0.1
    inits = [w("W", 6, 3, 3, 3), w("B", 6), w("scale", 6), w("bias", 6), w("mean", 6), numpy_helper.from_array(var, "var")]
    return model(nodes, [("x", [1, 3, 8, 8])], outputs, inits)


def conv_mul_add(mul_shape=(6, 1, 1), add_shape=(1, 6, 1, 1), bias=True):
    # caffe2's BatchNorm export: Conv → Mul(scale) → Add(bias), constants per output channel.
    nodes = [conv("conv", "x", "W", "c", "B" if bias else None, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["c", "s"], ["m"], name="mul"),
             helper.make_node("Add", ["a", "m"], ["y"], name="add")]
    inits = [w("W", 6, 3, 3, 3), w("s", *mul_shape), w("a", *add_shape)] + ([w("B", 6)] if bias else [])
    return model(nodes, [("x", [1, 3, 8, 8])], ["y"], inits)


def identity_dropout():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Identity", ["r"], ["i"], name="ident"),
             helper.make_node("Dropout", ["i"], ["d"], name="drop"),
             helper.make_node("Sigmoid", ["d"], ["s"], name="sig"),
             helper.make_node("Identity", ["s"], ["y"], name="out_ident")]
    return model(nodes, [("x", [2, 5])], ["y"], [], opset=13)


def constant_folding():
    nodes = [helper.make_node("Constant", [], ["c"], name="const", value=const("cv", rng.standard_normal(4))),
             helper.make_node("Unsqueeze", ["c", "axes"], ["u"], name="unsq"),
             helper.make_node("Mul", ["x", "u"], ["y"], name="mul")]
    inits = [numpy_helper.from_array(np.array([1, 2], np.int64), "axes")]
    return model(nodes, [("x", [1, 4, 3, 3])], ["y"], inits)


def engine_folding():
    # Range and Cast have no evaluator of cleave's own: the engine computes them.
    nodes = [helper.make_node("Range", ["start", "limit", "delta"], ["r"], name="range"),
             helper.make_node("Cast", ["r"], ["rf"], name="cast", to=F),
             helper.make_node("Mul", ["x", "rf"], ["y"], name="mul")]
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("start", 1), ("limit", 7), ("delta", 2))]
    return model(nodes, [("x", [2, 3])], ["y"], inits)


def common_subexpressions(same_weights=True):
    # Two branches that compute the same thing from equal weights (one array under two names).
    W = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    W1 = W if same_weights else rng.standard_normal(W.shape).astype(np.float32)
    nodes = [conv("conv0", "x", "W0", "c0", pads=[1] * 4), conv("conv1", "x", "W1", "c1", pads=[1] * 4),
             helper.make_node("Relu", ["c0"], ["r0"], name="relu0"), helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Add", ["r0", "r1"], ["y"], name="add")]
    inits = [numpy_helper.from_array(W, "W0"), numpy_helper.from_array(W1, "W1")]
    return model(nodes, [("x", [1, 3, 8, 8])], ["y"], inits)


def join_conv(kernels=(3, 3, 3)):
    nodes, inits, outs = [], [], []
    for i, (k, o) in enumerate(zip(kernels, (4, 6, 2))):
        p = k // 2
        nodes.append(conv(f"conv{i}", "x", f"W{i}", f"c{i}", f"B{i}" if i != 1 else None, kernel_shape=[k, k], pads=[p] * 4))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"y{i}"], name=f"relu{i}"))
        inits.append(w(f"W{i}", o, 3, k, k))
        if i != 1:
            inits.append(w(f"B{i}", o))
        outs.append(f"y{i}")
    return model(nodes, [("x", [1, 3, 8, 8])], outs, inits)


def join_matmul():
    nodes = [helper.make_node("MatMul", ["x", "W0"], ["y0"], name="fc0"), helper.make_node("MatMul", ["x", "W1"], ["y1"], name="fc1")]
    return model(nodes, [("x", [2, 16])], ["y0", "y1"], [w("W0", 16, 8), w("W1", 16, 12)])


def tile_conv():
    # input 256 KiB + output 4 MiB + weights: over the myriad profile's 4 MiB budget.
    nodes = [conv("big", "x", "W", "y", "B", kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    return model(nodes, [("x", [1, 16, 64, 64])], ["y"], [w("W", 256, 16, 3, 3), w("B", 256)])


def tile_pool():
    nodes = [helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2])]
    return model(nodes, [("x", [1, 64, 128, 128])], ["y"], [])


def tile_space(x, kernel, co=None, group=1, act=None, **attrs):
    """A Conv whose input alone passes the myriad profile's 4 MiB: tiled over space."""
    ci = x[1]
    nodes = [conv("big", "x", "W", "c" if act else "y", "B", kernel_shape=kernel, group=group, **attrs)]
    if act:
        nodes.append(helper.make_node(act, ["c"], ["y"], name="act"))
    co = co or ci
    return model(nodes, [("x", x)], ["y"], [w("W", co, ci // group, *kernel), w("B", co)])


def tile_pool_space(op, x, **attrs):
    """A one-channel pool over 4 MiB: no channel tiling possible, so tiled over space."""
    nodes = [helper.make_node(op, ["x"], ["y"], name="pool", **attrs)]
    return model(nodes, [("x", x)], ["y"], [])


def tile_in_channels_conv():
    # input 4 MiB and weights 4.7 MB: one output channel with all its inputs does not fit, so
    # input-channel tiles joined by a Sum; the Relu stays after the Sum.
    nodes = [conv("big", "x", "W", "c", "B", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    return model(nodes, [("x", [1, 65536, 4, 4])], ["y"], [w("W", 2, 65536, 3, 3), w("B", 2)])


def tile_in_channels_matmul():
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")]
    return model(nodes, [("x", [2, 262144])], ["y"], [w("W", 262144, 8)])


def tile_in_channels_gemm():
    # Gemm with B transposed, alpha and beta: C goes to the first tile only.
    nodes = [helper.make_node("Gemm", ["x", "W", "C"], ["y"], name="fc", transB=1, alpha=0.5, beta=2.0)]
    return model(nodes, [("x", [4, 131072])], ["y"], [w("W", 8, 131072), w("C", 8)])


def tile_space_and_out_channels():
    # Input 4.2 MB and weights 4.9 MB: neither space nor output channels alone fits, both do.
    return tile_space([1, 64, 128, 129], [5, 5], co=768, pads=[2, 2, 2, 2])


# Tiling edge cases: name -> model. Each is tiled once under the myriad profile's 4 MiB budget.
TILE_CASES = {
    "tile_space_conv": tile_space([1, 16, 256, 256], [3, 3], pads=[1, 1, 1, 1], act="Relu"),
    "tile_space_stride_dilation_asym_pads": tile_space([1, 16, 257, 255], [3, 3], strides=[2, 2], dilations=[2, 2], pads=[0, 1, 2, 1]),
    "tile_space_stride_over_kernel": tile_space([1, 16, 255, 257], [2, 2], strides=[3, 3]),
    "tile_space_same_upper": tile_space([1, 16, 255, 256], [4, 4], strides=[3, 3], auto_pad="SAME_UPPER"),
    "tile_space_same_lower": tile_space([1, 16, 256, 255], [4, 4], strides=[2, 2], auto_pad="SAME_LOWER"),
    "tile_space_depthwise": tile_space([1, 16, 256, 257], [5, 5], group=16, pads=[2, 2, 2, 2], act="LeakyRelu"),
    "tile_space_rows_and_columns": tile_space([1, 1, 6, 400000], [3, 3], pads=[1, 1, 1, 1]),
    "tile_space_maxpool_ceil": tile_pool_space("MaxPool", [1, 1, 1101, 1001], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    "tile_space_avgpool_pads_ceil": tile_pool_space("AveragePool", [1, 1, 1031, 1030], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1, ceil_mode=1),
    "tile_space_avgpool_exclude_pad": tile_pool_space("AveragePool", [1, 1, 1030, 1031], kernel_shape=[4, 4], strides=[3, 3], pads=[2, 1, 2, 3]),
    "tile_in_channels_conv": tile_in_channels_conv(),
    "tile_in_channels_matmul": tile_in_channels_matmul(),
    "tile_in_channels_gemm": tile_in_channels_gemm(),
    "tile_space_and_out_channels": tile_space_and_out_channels(),
}

CASES = {
    "group_conv": (group_conv(), "cpu", {"group_conv": 1}),
    "neg_group_conv_dilations": (group_conv(dilations=(1, 2, 1)), "cpu", {}),
    "neg_group_conv_order": (group_conv(order=(0, 2, 1)), "cpu", {}),
    "identity_power": (identity_power(), "cpu", {"identity_power": 3}),
    "neg_identity_power": (identity_power(mul=2.0, add_shape=(2, 1, 1, 1)), "cpu", {"identity_power": 1}),
    "batchnorm": (batchnorm(), "cpu", {"fold_batchnorm": 1}),
    "neg_batchnorm_shared": (batchnorm(shared=True), "cpu", {}),
    "conv_mul_add": (conv_mul_add(), "cpu", {"fold_conv_mul_add": 2}),
    "conv_mul_add_scalar_no_bias": (conv_mul_add(mul_shape=(1,), add_shape=(), bias=False), "cpu", {"fold_conv_mul_add": 2}),
    # A Mul varying over space is not per channel, and the Add then follows a Mul, not a Conv.
    "neg_conv_mul_spatial": (conv_mul_add(mul_shape=(1, 1, 8, 8)), "cpu", {}),
    "identity_dropout": (identity_dropout(), "cpu", {"remove_identity": 3}),
    "constant_folding": (constant_folding(), "cpu", {"fold_constants": 2}),
    "engine_folding": (engine_folding(), "cpu", {"fold_constants": 2}),
    "common_subexpressions": (common_subexpressions(), "cpu", {"common_subexpressions": 2}),
    "neg_common_subexpressions": (common_subexpressions(same_weights=False), "cpu", {}),
    "join_conv": (join_conv(), "myriad", {"join": 1}),
    "neg_join_kernels": (join_conv(kernels=(3, 1, 5)), "myriad", {}),
    "join_matmul": (join_matmul(), "myriad", {"join": 1}),
    "tile_conv": (tile_conv(), "myriad", {"tile": 1}),
    "tile_pool": (tile_pool(), "myriad", {"tile": 1}),
    "neg_tile_on_cpu": (tile_conv(), "cpu", {}),
    **{name: (m, "myriad", {"tile": 1}) for name, m in TILE_CASES.items()},
}


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    expected = {}
    for name, (m, devices, counts) in CASES.items():
        onnx.save(m, out / f"{name}.onnx")
        expected[name] = {"devices": devices, "applied": counts}
    (out / "expected.json").write_text(json.dumps(expected, indent=1))
    print(f"wrote {len(CASES)} models to {out}")


if __name__ == "__main__":
    main()
