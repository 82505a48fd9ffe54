#!/usr/bin/env python3
"""Invalid models, one defect each, grouped by class, and what cleave's one-line refusal must
say. Each is proven invalid by an oracle that is not cleave: the onnx checker (full_check), or
where the checker lets it pass, onnxruntime refusing to load it or to run it on zeros. Writes
OUTDIR/NAME.onnx and OUTDIR/expected.json ({name: substring of cleave's message}), and the
controls as OUTDIR/control_NAME.onnx (listed in controls.json), which cleave must take; exits 1 if
an oracle accepts a case, since then it proves nothing, or a control model (the same
builders, no defect) is refused, since then the builders are what the oracle refuses.

    python3 scripts/testdata/invalid_models.py OUTDIR [--cleave BIN]

With --cleave, runs `BIN partition` on every case and prints, per class, how many cleave
refused with the expected message, how many it accepted and how many crashed.
"""
import argparse
import json
import pathlib
import subprocess
import sys
from collections import defaultdict

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def model(nodes, inits=(), inputs=(("x", [1, 4, 2, 2]),), outputs=("y",), opset=17):
    # Each output is cast to float and summed to a scalar, so the graph's outputs have a known
    # type and shape whatever the defective node makes: onnx 1.23's checker rejects an output
    # without a shape, and that refusal would hide whether it sees the defect.
    tail, outs = [], []
    for n in outputs:
        tail += [helper.make_node("Cast", [n], [f"{n}_f"], name=f"{n}_cast", to=F),
                 helper.make_node("ReduceSum", [f"{n}_f"], [f"{n}_sum"], name=f"{n}_sum", keepdims=0)]
        outs.append(helper.make_tensor_value_info(f"{n}_sum", F, []))
    g = helper.make_graph(list(nodes) + tail, "g", [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                          outs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def one(op, *, inputs=("x",), inits=(), opset=17, **attrs):
    return model([helper.make_node(op, list(inputs), ["y"], name="n0", **attrs)], inits, opset=opset)


def w(name, shape, dtype=np.float32):
    return numpy_helper.from_array(np.zeros(shape, dtype), name)


def raw(name, dims, data_type, nbytes):
    t = TensorProto(name=name, dims=dims, data_type=data_type)
    t.raw_data = bytes(nbytes)
    return t


def body(n_in, n_out, name="b"):
    ins = [helper.make_tensor_value_info(f"{name}_i{k}", F, None) for k in range(n_in)]
    nodes = [helper.make_node("Identity", [f"{name}_i{min(k, n_in - 1)}"] if n_in else ["c"], [f"{name}_o{k}"]) for k in range(n_out)]
    consts = [] if n_in else [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.zeros([1], np.float32)))]
    outs = [helper.make_tensor_value_info(f"{name}_o{k}", F, None) for k in range(n_out)]
    return helper.make_graph(consts + nodes, name, ins, outs)


def if_model():
    cond = numpy_helper.from_array(np.array(True), "cond")
    node = helper.make_node("If", ["cond"], ["y"], name="n0", then_branch=body(0, 2, "then"), else_branch=body(0, 1, "else"))
    return model([node], [cond], inputs=())


def loop_model():
    trip = numpy_helper.from_array(np.array(3, np.int64), "M")
    cond = numpy_helper.from_array(np.array(True), "cond")
    # One loop-carried value: the body needs 3 inputs (iteration, condition, value); it has 2.
    node = helper.make_node("Loop", ["M", "cond", "x"], ["y"], name="n0", body=body(2, 2, "body"))
    return model([node], [trip, cond])


def scan_model():
    # num_scan_inputs 3 with 1 input in all.
    node = helper.make_node("Scan", ["x"], ["y"], name="n0", num_scan_inputs=3, body=body(1, 1, "body"))
    return model([node])


def i64(name, v):
    return numpy_helper.from_array(np.array(v, np.int64), name)


def f32(name, v):
    return numpy_helper.from_array(np.array(v, np.float32), name)


def with_input(m, field, value):
    """`m` with the first graph input's `field` (elem_type, or dim K's value) set to `value`."""
    t = m.graph.input[0].type.tensor_type
    if field == "elem_type":
        t.elem_type = value
    else:
        t.shape.dim[field].dim_value = value
    return m


def with_opset(m, version):
    m.opset_import[0].version = version
    return m


def retyped_output(m, code):
    m.graph.output[0].type.tensor_type.elem_type = code
    return m


def branch(node_attrs):
    cond = numpy_helper.from_array(np.array(True), "cond")
    return model([helper.make_node("If", ["cond"], ["y"], name="n0", **node_attrs)], [cond], inputs=())


W = [w("w", [4, 4, 1, 1])]
CONV = dict(inputs=("x", "w"), inits=W)

# name: (class, model, what cleave's refusal says)
CASES = {
    # Attribute values out of range.
    "depth_to_space_blocksize_0": ("attribute value", one("DepthToSpace", blocksize=0), "node 'n0' (DepthToSpace): blocksize 0 is below 1"),
    "space_to_depth_blocksize_neg": ("attribute value", one("SpaceToDepth", blocksize=-1), "node 'n0' (SpaceToDepth): blocksize -1 is below 1"),
    "conv_strides_0": ("attribute value", one("Conv", **CONV, strides=[0, 1]), "node 'n0' (Conv): strides [0, 1]: 0 is below 1"),
    "conv_dilations_0": ("attribute value", one("Conv", **CONV, dilations=[1, 0]), "node 'n0' (Conv): dilations [1, 0]: 0 is below 1"),
    "conv_group_0": ("attribute value", one("Conv", **CONV, group=0), "node 'n0' (Conv): group 0 is below 1"),
    "conv_pads_negative": ("attribute value", one("Conv", **CONV, pads=[0, -1, 0, 0]), "node 'n0' (Conv): pads [0, -1, 0, 0]: -1 is below 0"),
    "maxpool_kernel_0": ("attribute value", one("MaxPool", kernel_shape=[0, 1]), "node 'n0' (MaxPool): kernel_shape [0, 1]: 0 is below 1"),
    "lrn_size_0": ("attribute value", one("LRN", size=0), "node 'n0' (LRN): size 0 is below 1"),
    "transpose_perm_repeat": ("attribute value", one("Transpose", perm=[0, 1, 1, 3]), "node 'n0' (Transpose): perm [0, 1, 1, 3] is not a permutation"),
    # Attribute lists whose length does not match the rank.
    "conv_pads_length": ("attribute length", one("Conv", **CONV, pads=[0, 0, 0]), "node 'n0' (Conv): pads [0, 0, 0] has 3 entries; 2 spatial axes need 4"),
    "maxpool_strides_length": ("attribute length", one("MaxPool", kernel_shape=[1, 1], strides=[1, 1, 1]), "node 'n0' (MaxPool): strides [1, 1, 1] has 3 entries; 2 spatial axes need 2"),
    "resize_scales_length": ("attribute length", one("Resize", inputs=("x", "", "sc"), inits=[f32("sc", [1, 1, 2])]), "node 'n0' (Resize): scales has 3 entries; the input has rank 4"),
    "split_sizes_count": ("attribute length", model([helper.make_node("Split", ["x", "s"], ["y", "z"], axis=1, name="n0")], [i64("s", [2, 1, 1])], outputs=("y", "z")), "node 'n0' (Split): split [2, 1, 1] has 3 sizes for 2 outputs"),
    "pad_pads_length": ("attribute length", one("Pad", inputs=("x", "p"), inits=[i64("p", [0, 0, 1])]), "node 'n0' (Pad): pads [0, 0, 1] has 3 entries; 4 padded axes need 8"),
    # Axes out of range for the inferred rank.
    "concat_axis": ("axis", one("Concat", inputs=("x", "x"), axis=4), "node 'n0' (Concat): axis 4 is out of range for rank 4"),
    "softmax_axis": ("axis", one("Softmax", axis=-5), "node 'n0' (Softmax): axis -5 is out of range for rank 4"),
    "gather_axis": ("axis", one("Gather", inputs=("x", "i"), inits=[i64("i", [0])], axis=9), "node 'n0' (Gather): axis 9 is out of range for rank 4"),
    "flatten_axis": ("axis", one("Flatten", axis=5), "node 'n0' (Flatten): axis 5 is out of range for rank 4"),
    "argmax_axis": ("axis", one("ArgMax", axis=4), "node 'n0' (ArgMax): axis 4 is out of range for rank 4"),
    "split_axis": ("axis", one("Split", axis=-7), "node 'n0' (Split): axis -7 is out of range for rank 4"),
    "reduce_axes": ("axis", one("ReduceSum", inputs=("x", "a"), inits=[i64("a", [6])]), "node 'n0' (ReduceSum): axes [6] out of range for rank 4"),
    "unsqueeze_axes_range": ("axis", one("Unsqueeze", inputs=("x", "a"), inits=[i64("a", [7])]), "node 'n0' (Unsqueeze): axes [7]: 7 is out of range for rank 5"),
    "unsqueeze_axes_twice": ("axis", one("Unsqueeze", inputs=("x", "a"), inits=[i64("a", [0, 0])]), "node 'n0' (Unsqueeze): axes [0, 0] name axis 0 twice"),
    "squeeze_axes_range": ("axis", one("Squeeze", inputs=("x", "a"), inits=[i64("a", [-9])]), "node 'n0' (Squeeze): axes [-9]: -9 is out of range for rank 4"),
    "squeeze_axis_not_1": ("axis", one("Squeeze", inputs=("x", "a"), inits=[i64("a", [1])]), "node 'n0' (Squeeze): axes [1]: axis 1 has size 4, not 1"),
    # Inputs and outputs: how many, their ranks, whether the operands fit each other.
    "conv_one_input": ("operands", one("Conv"), "node 'n0' (Conv): has 1 input; Conv at opset 11 takes 2 to 3"),
    "relu_two_inputs": ("operands", one("Relu", inputs=("x", "x")), "node 'n0' (Relu): has 2 inputs; Relu at opset 14 takes 1"),
    "add_one_input": ("operands", one("Add"), "node 'n0' (Add): has 1 input; Add at opset 14 takes 2"),
    "relu_two_outputs": ("operands", model([helper.make_node("Relu", ["x"], ["y", "z"], name="n0")], outputs=("y", "z")), "node 'n0' (Relu): has 2 outputs; Relu at opset 14 gives 1"),
    "topk_one_output": ("operands", one("TopK", inputs=("x", "k"), inits=[i64("k", [1])]), "node 'n0' (TopK): has 1 output; TopK at opset 11 gives 2"),
    "gemm_rank_4": ("operands", one("Gemm", inputs=("x", "w"), inits=[w("w", [2, 3])]), "node 'n0' (Gemm): input 0 has rank 4; Gemm multiplies matrices (rank 2)"),
    "gemm_b_rank_3": ("operands", model([helper.make_node("Gemm", ["x", "w"], ["y"], name="n0")], [w("w", [4, 3, 1])], inputs=(("x", [2, 4]),)), "node 'n0' (Gemm): input 1 has rank 3; Gemm multiplies matrices (rank 2)"),
    "matmul_inner_dims": ("operands", one("MatMul", inputs=("x", "w"), inits=[w("w", [3, 5])]), "node 'n0' (MatMul): inner dimensions differ: 2 (input 0's last) and 3 (input 1's second-to-last)"),
    "matmul_inner_dims_2d": ("operands", model([helper.make_node("MatMul", ["x", "w"], ["y"], name="n0")], [w("w", [5, 3])], inputs=(("x", [2, 4]),)), "node 'n0' (MatMul): inner dimensions differ: 4 (input 0's last) and 5"),
    "concat_ranks": ("operands", one("Concat", inputs=("x", "w"), inits=[w("w", [2, 2])], axis=0), "node 'n0' (Concat): input 1 has rank 2, input 0 rank 4"),
    "conv_weight_channels": ("operands", one("Conv", inputs=("x", "w"), inits=[w("w", [4, 3, 1, 1])]), "node 'n0' (Conv): weights [4, 3, 1, 1] take 3 input channels per group × group 1; the input has 4"),
    "conv_group_channels": ("operands", one("Conv", **CONV, group=3), "node 'n0' (Conv): weights [4, 4, 1, 1] take 4 input channels per group × group 3; the input has 4"),
    "conv_weight_rank": ("operands", one("Conv", inputs=("x", "w"), inits=[w("w", [4, 4, 1])]), "node 'n0' (Conv): weights [4, 4, 1] have rank 3; the input has rank 4"),
    "conv_input_rank_2": ("operands", model([helper.make_node("Conv", ["x", "w"], ["y"], name="n0")], [w("w", [4, 4])], inputs=(("x", [2, 4]),)), "node 'n0' (Conv): the input has rank 2; Conv needs batch, channels and at least one spatial axis"),
    "conv_group_outputs": ("operands", one("Conv", inputs=("x", "w"), inits=[w("w", [3, 2, 1, 1])], group=2), "node 'n0' (Conv): 3 output channels do not divide into group 2"),
    "conv_transpose_channels": ("operands", one("ConvTranspose", inputs=("x", "w"), inits=[w("w", [3, 4, 1, 1])]), "node 'n0' (ConvTranspose): weights [3, 4, 1, 1] take 3 input channels; the input has 4"),
    "add_mixed_types": ("operands", one("Add", inputs=("x", "i"), inits=[i64("i", [1])]), "node 'n0' (Add): input 1 is int64 and input 0 float32; Add takes both as T"),
    "gather_float_indices": ("operands", one("Gather", inputs=("x", "i"), inits=[f32("i", [0])]), "node 'n0' (Gather): input 1 is float32; Gather takes Tind in {int32, int64}"),
    # Reshape targets no tensor can take.
    "reshape_two_minus_one": ("reshape", one("Reshape", inputs=("x", "s"), inits=[i64("s", [-1, -1])]), "node 'n0' (Reshape): shape [-1, -1] has more than one -1"),
    "reshape_not_dividing": ("reshape", one("Reshape", inputs=("x", "s"), inits=[i64("s", [3, -1])]), "node 'n0' (Reshape): shape [3, -1] cannot hold the input's 16 elements"),
    "reshape_huge": ("reshape", one("Reshape", inputs=("x", "s"), inits=[i64("s", [1 << 40, 1 << 40])]), "node 'n0' (Reshape): shape [1099511627776, 1099511627776] has more than 2^63 elements"),
    "reshape_below_minus_one": ("reshape", one("Reshape", inputs=("x", "s"), inits=[i64("s", [-2, 8])]), "node 'n0' (Reshape): shape [-2, 8]: -2 is below -1"),
    "reshape_other_size": ("reshape", one("Reshape", inputs=("x", "s"), inits=[i64("s", [3, 5])]), "node 'n0' (Reshape): shape [3, 5] cannot hold the input's 16 elements"),
    # Shape and size arguments given as constant inputs.
    "tile_negative": ("shape argument", one("Tile", inputs=("x", "r"), inits=[i64("r", [1, -1, 1, 1])]), "node 'n0' (Tile): repeats [1, -1, 1, 1]: -1 is negative"),
    "tile_length": ("shape argument", one("Tile", inputs=("x", "r"), inits=[i64("r", [1, 2])]), "node 'n0' (Tile): repeats [1, 2] has 2 entries; the input has rank 4"),
    "reshape_copies_missing_dim": ("reshape", one("Reshape", inputs=("x", "s"), inits=[i64("s", [0, 0, 0, 0, 0])]), "node 'n0' (Reshape): shape [0, 0, 0, 0, 0] copies dim 4 (a 0), which the input's [1, 4, 2, 2] lacks"),
    "topk_k_negative": ("shape argument", model([helper.make_node("TopK", ["x", "k"], ["y", "z"], name="n0")], [i64("k", [-1])], outputs=("y", "z")), "node 'n0' (TopK): k -1 is negative"),
    "expand_negative": ("shape argument", one("Expand", inputs=("x", "s"), inits=[i64("s", [1, 4, -2, 2])]), "node 'n0' (Expand): shape [1, 4, -2, 2]: -2 is negative"),
    "expand_not_broadcasting": ("shape argument", one("Expand", inputs=("x", "s"), inits=[i64("s", [1, 3, 2, 2])]), "node 'n0' (Expand): shape [1, 3, 2, 2] does not broadcast with the input's [1, 4, 2, 2]"),
    "constant_of_shape_negative": ("shape argument", one("ConstantOfShape", inputs=("s",), inits=[i64("s", [2, -1])]), "node 'n0' (ConstantOfShape): shape [2, -1]: -1 is negative"),
    "slice_step_0": ("shape argument", one("Slice", inputs=("x", "s", "e", "a", "st"), inits=[i64("s", [0]), i64("e", [2]), i64("a", [1]), i64("st", [0])]), "node 'n0' (Slice): steps [0]: a step of 0 never advances"),
    "slice_second_step_0": ("shape argument", one("Slice", inputs=("x", "s", "e", "a", "st"), inits=[i64("s", [0, 0]), i64("e", [2, 2]), i64("a", [2, 3]), i64("st", [1, 0])]), "node 'n0' (Slice): steps [1, 0]: a step of 0 never advances"),
    "split_not_summing": ("shape argument", model([helper.make_node("Split", ["x", "s"], ["y", "z"], axis=1, name="n0")], [i64("s", [1, 1])], outputs=("y", "z")), "node 'n0' (Split): split [1, 1] sums to 2, but axis 1 has 4"),
    "split_negative": ("shape argument", model([helper.make_node("Split", ["x", "s"], ["y", "z"], axis=1, name="n0")], [i64("s", [5, -1])], outputs=("y", "z")), "node 'n0' (Split): split [5, -1]: -1 is negative"),
    "resize_scale_negative": ("shape argument", one("Resize", inputs=("x", "", "sc"), inits=[f32("sc", [1, 1, -2, 2])]), "node 'n0' (Resize): scales [1.0, 1.0, -2.0, 2.0]: -2 is not above 0"),
    "resize_scale_0": ("shape argument", one("Resize", inputs=("x", "", "sc"), inits=[f32("sc", [1, 1, 0, 2])]), "node 'n0' (Resize): scales [1.0, 1.0, 0.0, 2.0]: 0 is not above 0"),
    "onehot_depth_negative": ("shape argument", model([helper.make_node("OneHot", ["i", "d", "v"], ["y"], name="n0")], [i64("i", [1, 2]), i64("d", -3), f32("v", [0, 1])], inputs=()), "node 'n0' (OneHot): depth -3 is negative"),
    "range_delta_0": ("shape argument", model([helper.make_node("Range", ["a", "b", "c"], ["y"], name="n0")], [f32("a", 0), f32("b", 4), f32("c", 0)], inputs=()), "node 'n0' (Range): delta 0 never reaches the limit"),
    "range_int_delta_0": ("shape argument", model([helper.make_node("Range", ["a", "b", "c"], ["y"], name="n0")], [i64("a", 0), i64("b", 4), i64("c", 0)], inputs=()), "node 'n0' (Range): delta 0 never reaches the limit"),
    # Windows and blocks larger than what they cover: output dims of 0 or below, or a fraction.
    "conv_dilation_past_input": ("window past input", one("Conv", inputs=("x", "w"), inits=[w("w", [4, 4, 2, 2])], dilations=[5, 5]), "node 'n0' (Conv): the window spans 6 along spatial axis 0 (kernel 2, dilation 5), more than the input's 2 plus pads 0 and 0: no output"),
    "conv_kernel_past_input": ("window past input", one("Conv", inputs=("x", "w"), inits=[w("w", [4, 4, 3, 3])]), "node 'n0' (Conv): the window spans 3 along spatial axis 0"),
    "maxpool_kernel_past_input": ("window past input", one("MaxPool", kernel_shape=[5, 5]), "node 'n0' (MaxPool): the window spans 5 along spatial axis 0"),
    "depth_to_space_blocksize_large": ("window past input", one("DepthToSpace", blocksize=4), "node 'n0' (DepthToSpace): blocksize 4: channels 4 does not divide by 16"),
    "space_to_depth_blocksize_large": ("window past input", one("SpaceToDepth", blocksize=3), "node 'n0' (SpaceToDepth): blocksize 3: height 2 does not divide by 3"),
    # Sizes past what any tensor holds.
    "input_dims_overflow": ("size past 2^63", model([helper.make_node("Relu", ["x"], ["y"], name="n0")], inputs=(("x", [1 << 40, 1 << 40, 4, 4]),)), "tensor 'x': dims [1099511627776, 1099511627776, 4, 4] hold more than 2^63 elements"),
    "relu_past_2_63": ("size past 2^63", model([helper.make_node("Relu", ["x"], ["y"], name="n0")], inputs=(("x", [1 << 32, 1 << 32, 4]),)), "tensor 'x': dims [4294967296, 4294967296, 4] hold more than 2^63 elements"),
    "tile_repeats_overflow": ("size past 2^63", one("Tile", inputs=("x", "r"), inits=[i64("r", [1 << 62, 1, 1, 1])]), "node 'n0' (Tile): repeats [4611686018427387904, 1, 1, 1] make an output of more than 2^63 elements"),
    "tile_repeats_product_overflow": ("size past 2^63", one("Tile", inputs=("x", "r"), inits=[i64("r", [1 << 31, 1 << 31, 1 << 31, 1])]), "node 'n0' (Tile): repeats [2147483648, 2147483648, 2147483648, 1] make an output of more than 2^63 elements"),
    # Einsum equations that do not parse.
    "einsum_bad_letter": ("einsum", one("Einsum", inputs=("x",), equation="ab$c->"), "node 'n0' (Einsum): equation 'ab$c->': '$' is not a letter"),
    "einsum_two_arrows": ("einsum", one("Einsum", inputs=("x",), equation="abcd->->a"), "node 'n0' (Einsum): equation 'abcd->->a': more than one '->'"),
    # Slice axes out of range; negative pads that crop more than the axis holds.
    "slice_axis_out_of_range": ("axis", one("Slice", inputs=("x", "s", "e", "a"), inits=[i64("s", [0]), i64("e", [1]), i64("a", [4])]), "node 'n0' (Slice): axes [4]: 4 is out of range for rank 4"),
    "slice_axis_below_range": ("axis", one("Slice", inputs=("x", "s", "e", "a"), inits=[i64("s", [0]), i64("e", [1]), i64("a", [-5])]), "node 'n0' (Slice): axes [-5]: -5 is out of range for rank 4"),
    "pad_crop_past_input": ("shape argument", one("Pad", inputs=("x", "p"), inits=[i64("p", [0, 0, -3, 0, 0, 0, 0, 0])]), "node 'n0' (Pad): pads [0, 0, -3, 0, 0, 0, 0, 0] crop 3 from axis 2, which holds 2"),
    "pad_crop_both_sides": ("shape argument", one("Pad", inputs=("x", "p"), inits=[i64("p", [0, 0, 0, -2, 0, 0, 0, -1])]), "node 'n0' (Pad): pads [0, 0, 0, -2, 0, 0, 0, -1] crop 3 from axis 3, which holds 2"),
    # Element type codes ONNX does not define.
    "init_unknown_type": ("element type", one("Add", inputs=("x", "w"), inits=[raw("w", [1], 99, 4)]), "tensor 'w'"),
    "input_unknown_type": ("element type", with_input(one("Relu"), "elem_type", 99), "tensor 'x': element type 99 is not an ONNX type"),
    "output_unknown_type": ("element type", retyped_output(one("Relu"), 77), "tensor 'y_sum': element type 77 is not an ONNX type"),
    "cast_to_unknown_type": ("element type", one("Cast", to=99), "node 'n0' (Cast): to 99 is not an ONNX element type"),
    "eyelike_unknown_dtype": ("element type", model([helper.make_node("EyeLike", ["x"], ["y"], name="n0", dtype=42)], inputs=(("x", [3, 3]),)), "node 'n0' (EyeLike): dtype 42 is not an ONNX element type"),
    # Opsets that do not exist.
    "opset_999": ("opset", one("Relu", opset=999), "imports opset 999 of ai.onnx"),
    "opset_0": ("opset", one("Relu", opset=0), "imports opset 0 of ai.onnx; opsets start at 1"),
    "opset_negative": ("opset", with_opset(one("Relu"), -3), "imports opset -3 of ai.onnx; opsets start at 1"),
    # Attributes: unknown, of the wrong kind, required and missing.
    "attribute_unknown": ("attribute kind", one("Relu", foo=1), "node 'n0' (Relu): attribute 'foo' is not one of Relu at opset 14"),
    "attribute_kind": ("attribute kind", one("Softmax", axis=1.5), "node 'n0' (Softmax): attribute 'axis' is a float; Softmax wants an int"),
    "if_without_else": ("attribute kind", branch({"then_branch": body(0, 1, "then")}), "node 'n0' (If): lacks the required attribute 'else_branch' (graph)"),
    "if_without_then": ("attribute kind", branch({"else_branch": body(0, 1, "else")}), "node 'n0' (If): lacks the required attribute 'then_branch' (graph)"),
    "loop_without_body": ("attribute kind", model([helper.make_node("Loop", ["M", "cond", "x"], ["y"], name="n0")], [i64("M", 3), numpy_helper.from_array(np.array(True), "cond")]), "node 'n0' (Loop): lacks the required attribute 'body' (graph)"),
    # Subgraphs that do not fit their node.
    "if_branch_arity": ("subgraph", if_model(), "node 'n0' (If): then_branch has 2 outputs, else_branch 1, the node 1"),
    "loop_body_arity": ("subgraph", loop_model(), "node 'n0' (Loop): body has 2 inputs; 1 loop-carried value needs 3"),
    "scan_num_inputs": ("subgraph", scan_model(), "node 'n0' (Scan): num_scan_inputs 3 is more than its 1 inputs"),
    # Initializers whose bytes do not fit their type.
    "init_bytes_short": ("initializer", one("Add", inputs=("x", "w"), inits=[raw("w", [2, 2], F, 12)]), "tensor 'w': holds 12 bytes, but float32 [2, 2] needs 16"),
    "init_negative_dim": ("initializer", one("Add", inputs=("x", "w"), inits=[raw("w", [-2], F, 8)]), "tensor 'w': negative dimension in [-2]"),
    # Wiring.
    "undefined_input": ("wiring", model([helper.make_node("Relu", ["ghost"], ["y"], name="n0")]), "ghost"),
    "cycle": ("wiring", model([helper.make_node("Add", ["x", "b"], ["a"], name="n0"), helper.make_node("Relu", ["a"], ["b"], name="n1"),
                               helper.make_node("Relu", ["a"], ["y"], name="n2")]), "cycle"),
    "two_producers": ("wiring", model([helper.make_node("Relu", ["x"], ["y"], name="n0"), helper.make_node("Sigmoid", ["x"], ["y"], name="n1")]), "'y'"),
}

# The same builders without a defect: an oracle that refuses these refuses the builders.
CONTROLS = {
    "relu": one("Relu"),
    "conv": one("Conv", **CONV, strides=[1, 1], pads=[0, 0, 0, 0]),
    "reshape": one("Reshape", inputs=("x", "s"), inits=[i64("s", [2, -1])]),
    "split": model([helper.make_node("Split", ["x", "s"], ["y", "z"], axis=1, name="n0")], [i64("s", [1, 3])], outputs=("y", "z")),
    "if": branch({"then_branch": body(0, 1, "then"), "else_branch": body(0, 1, "else")}),
    "range": model([helper.make_node("Range", ["a", "b", "c"], ["y"], name="n0")], [f32("a", 0), f32("b", 4), f32("c", 1)], inputs=()),
    # Valid edges next to the classes above (cleave must take them: crates/cli/tests/cli.rs).
    "slice_step_int64_min": one("Slice", inputs=("x", "s", "e", "a", "st"), inits=[i64("s", [1]), i64("e", [0]), i64("a", [1]), i64("st", [-(1 << 63)])]),
    "conv_window_fills_input": one("Conv", inputs=("x", "w"), inits=[w("w", [4, 4, 2, 2])]),
    "pad_crop_all_but_one": one("Pad", inputs=("x", "p"), inits=[i64("p", [0, 0, -1, 0, 0, 0, 0, 0])]),
    "depth_to_space_blocksize_2": one("DepthToSpace", blocksize=2),
}


def refused_by(m):
    """Which oracle refuses `m`: "checker", "onnxruntime", or None when both accept it."""
    try:
        onnx.checker.check_model(m, full_check=True)
    except Exception:  # noqa: BLE001 - any refusal by the checker is what we want
        return "checker"
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
        feeds = {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], np.float32) for i in session.get_inputs()}
        session.run(None, feeds)
    except Exception:  # noqa: BLE001
        return "onnxruntime"
    return None


def report(out, expected, classes, cleave):
    rows = defaultdict(lambda: [0, 0, 0, 0])
    for name, message in expected.items():
        row = rows[classes[name]]
        row[0] += 1
        run = subprocess.run([cleave, "partition", str(out / f"{name}.onnx"), "--devices", "npu,cpu", "-o", str(out / f"out-{name}")],
                             capture_output=True, text=True, timeout=120)
        crashed = run.returncode not in (0, 2) or "panicked" in run.stderr
        if crashed:
            row[3] += 1
        elif run.returncode == 2 and message in run.stderr:
            row[1] += 1
        else:
            row[2] += 1
            print(f"  {name}: exit {run.returncode}: {run.stderr.strip()[:200]}")
    print(f"{'class':20} {'cases':>5} {'refused':>7} {'accepted':>8} {'crashed':>7}")
    total = [0, 0, 0, 0]
    for c, row in rows.items():
        print(f"{c:20} {row[0]:5} {row[1]:7} {row[2]:8} {row[3]:7}")
        total = [a + b for a, b in zip(total, row)]
    print(f"{'all':20} {total[0]:5} {total[1]:7} {total[2]:8} {total[3]:7}")
    return total[2] == 0 and total[3] == 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=pathlib.Path)
    parser.add_argument("--cleave", help="a cleave binary to run on every case")
    args = parser.parse_args()
    out = args.outdir
    out.mkdir(parents=True, exist_ok=True)
    bad = [f"control {name} refused by {who}" for name, m in CONTROLS.items() if (who := refused_by(m))]
    expected, classes, proof = {}, {}, defaultdict(int)
    for name, (cls, m, message) in CASES.items():
        who = refused_by(m)
        if who is None:
            bad.append(f"{name} accepted by the onnx checker and onnxruntime")
        proof[who] += 1
        (out / f"{name}.onnx").write_bytes(m.SerializeToString())
        expected[name] = message
        classes[name] = cls
    (out / "expected.json").write_text(json.dumps(expected, indent=1))
    for name, m in CONTROLS.items():
        (out / f"control_{name}.onnx").write_bytes(m.SerializeToString())
    (out / "controls.json").write_text(json.dumps(sorted(CONTROLS), indent=1))
    if bad:
        sys.exit("; ".join(bad))
    print(f"wrote {len(CASES)} invalid models in {len(set(classes.values()))} classes to {out} "
          f"(refused by the onnx checker: {proof['checker']}, by onnxruntime only: {proof['onnxruntime']})")
    if args.cleave and not report(out, expected, classes, args.cleave):
        sys.exit(1)


if __name__ == "__main__":
    main()
