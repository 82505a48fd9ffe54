#!/usr/bin/env python3
"""Models the onnx checker rejects (full_check, strict shape inference), one defect each, and
what cleave's one-line refusal must say. Writes OUTDIR/NAME.onnx and OUTDIR/expected.json
({name: substring of cleave's message}); exits 1 if the checker accepts one of them, since
then the case proves nothing.

    python3 scripts/invalid_models.py OUTDIR
"""
import json
import pathlib
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def model(nodes, inits=(), inputs=(("x", [1, 4, 2, 2]),), outputs=("y",), opset=17):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, F, None) for n in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def one(op, *, inputs=("x",), inits=(), opset=17, **attrs):
    return model([helper.make_node(op, list(inputs), ["t"], name="n0", **attrs),
                  helper.make_node("Relu", ["t"], ["y"], name="r")], inits, opset=opset)


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


CASES = {
    "depth_to_space_blocksize_0": (one("DepthToSpace", blocksize=0), "node 'n0' (DepthToSpace): blocksize 0 is below 1"),
    "space_to_depth_blocksize_neg": (one("SpaceToDepth", blocksize=-1), "node 'n0' (SpaceToDepth): blocksize -1 is below 1"),
    "conv_strides_0": (one("Conv", inputs=("x", "w"), inits=[w("w", [4, 4, 1, 1])], strides=[0, 1]), "node 'n0' (Conv): strides [0, 1]: 0 is below 1"),
    "conv_dilations_0": (one("Conv", inputs=("x", "w"), inits=[w("w", [4, 4, 1, 1])], dilations=[1, 0]), "node 'n0' (Conv): dilations [1, 0]: 0 is below 1"),
    "conv_group_0": (one("Conv", inputs=("x", "w"), inits=[w("w", [4, 4, 1, 1])], group=0), "node 'n0' (Conv): group 0 is below 1"),
    "conv_pads_negative": (one("Conv", inputs=("x", "w"), inits=[w("w", [4, 4, 1, 1])], pads=[0, -1, 0, 0]), "node 'n0' (Conv): pads [0, -1, 0, 0]: -1 is below 0"),
    "maxpool_kernel_0": (one("MaxPool", kernel_shape=[0, 1]), "node 'n0' (MaxPool): kernel_shape [0, 1]: 0 is below 1"),
    "transpose_perm_repeat": (one("Transpose", perm=[0, 1, 1, 3]), "node 'n0' (Transpose): perm [0, 1, 1, 3] is not a permutation"),
    "transpose_perm_rank": (one("Transpose", perm=[1, 0]), "node 'n0' (Transpose): perm [1, 0] has 2 entries; its input has rank 4"),
    "concat_axis": (one("Concat", inputs=("x", "x"), axis=4), "node 'n0' (Concat): axis 4 is out of range for rank 4"),
    "softmax_axis": (one("Softmax", axis=-5), "node 'n0' (Softmax): axis -5 is out of range for rank 4"),
    "gather_axis": (one("Gather", inputs=("x", "i"), inits=[numpy_helper.from_array(np.array([0], np.int64), "i")], axis=9), "node 'n0' (Gather): axis 9 is out of range for rank 4"),
    "flatten_axis": (one("Flatten", axis=5), "node 'n0' (Flatten): axis 5 is out of range for rank 4"),
    "argmax_axis": (one("ArgMax", axis=4), "node 'n0' (ArgMax): axis 4 is out of range for rank 4"),
    "split_axis": (one("Split", axis=-7), "node 'n0' (Split): axis -7 is out of range for rank 4"),
    "reduce_axes": (one("ReduceSum", inputs=("x", "a"), inits=[numpy_helper.from_array(np.array([6], np.int64), "a")]), "node 'n0' (ReduceSum): axes [6] out of range for rank 4"),
    "init_bytes_short": (one("Add", inputs=("x", "w"), inits=[raw("w", [2, 2], F, 12)]), "tensor 'w': holds 12 bytes, but float32 [2, 2] needs 16"),
    "init_unknown_type": (one("Add", inputs=("x", "w"), inits=[raw("w", [1], 99, 4)]), "tensor 'w'"),
    "init_negative_dim": (one("Add", inputs=("x", "w"), inits=[raw("w", [-2], F, 8)]), "tensor 'w': negative dimension in [-2]"),
    "opset_999": (one("Relu", opset=999), "imports opset 999 of ai.onnx"),
    "if_branch_arity": (if_model(), "node 'n0' (If): then_branch has 2 outputs, else_branch 1, the node 1"),
    "loop_body_arity": (loop_model(), "node 'n0' (Loop): body has 2 inputs; 1 loop-carried value needs 3"),
    "scan_num_inputs": (scan_model(), "node 'n0' (Scan): num_scan_inputs 3 is more than its 1 inputs"),
    "undefined_input": (model([helper.make_node("Relu", ["ghost"], ["y"], name="n0")]), "ghost"),
    "cycle": (model([helper.make_node("Add", ["x", "b"], ["a"], name="n0"), helper.make_node("Relu", ["a"], ["b"], name="n1"),
                     helper.make_node("Relu", ["a"], ["y"], name="n2")]), "cycle"),
    "two_producers": (model([helper.make_node("Relu", ["x"], ["y"], name="n0"), helper.make_node("Sigmoid", ["x"], ["y"], name="n1")]), "'y'"),
}


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    expected, accepted = {}, []
    for name, (m, message) in CASES.items():
        try:
            onnx.checker.check_model(m, full_check=True)
            accepted.append(name)
        except Exception:  # noqa: BLE001 - any refusal by the checker is what we want
            pass
        (out / f"{name}.onnx").write_bytes(m.SerializeToString())
        expected[name] = message
    (out / "expected.json").write_text(json.dumps(expected, indent=1))
    if accepted:
        sys.exit(f"the onnx checker accepts: {', '.join(accepted)}")
    print(f"wrote {len(CASES)} invalid models to {out}")


if __name__ == "__main__":
    main()
