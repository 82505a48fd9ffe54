"""What a served part says it takes, and what the ingress checks a request against: an input
whose rank the file does not give takes any shape, not only a scalar."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from cleave.serve import runtime, wire


def relu(shape):
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    if shape is not None:
        # The checker asks for a shape field; ONNX Runtime runs a graph whose inputs have none.
        onnx.checker.check_model(m)
    return m.SerializeToString()


def test_an_input_of_unknown_rank_takes_any_shape():
    part = runtime.RuntimePart({"backend": "cpu", "threads": 1}, relu(None))
    specs = part.input_specs()
    assert specs == {"x": ["float32", None]}
    for shape in [(3,), (2, 5), (1, 2, 3, 4)]:
        wire.check_input("x", np.dtype("float32"), shape, specs["x"])
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        (y,) = part.run(None, {"x": x})
        assert np.array_equal(y, np.maximum(x, 0))
    with pytest.raises(ValueError, match="float64"):
        wire.check_input("x", np.dtype("float64"), (3,), specs["x"])
    assert wire.body_limit(specs, ["x"]) == (wire.MAX_BODY_BYTES, "CLEAVE_MAX_BODY_BYTES")


def test_a_fixed_input_is_held_to_its_dims_and_sizes_the_body_limit():
    part = runtime.RuntimePart({"backend": "cpu", "threads": 1}, relu([2, 3]))
    specs = part.input_specs()
    assert specs == {"x": ["float32", [2, 3]]}
    wire.check_input("x", np.dtype("float32"), (2, 3), specs["x"])
    for bad in [(3,), (2, 4), (1, 2, 3)]:
        with pytest.raises(ValueError, match=r"the model takes \[2, 3\]"):
            wire.check_input("x", np.dtype("float32"), bad, specs["x"])
    limit, _ = wire.body_limit(specs, ["x"])
    assert limit < wire.MAX_BODY_BYTES
