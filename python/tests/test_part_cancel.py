"""A served part's run, cancelled by its own request's token: it stops where the engine can,
never starts where it is cancelled first, and another request's run on the same part goes on."""

import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from cleave import _cleave


def chain(n=384, layers=300):
    """x @ w `layers` times with random w: a run of about a second, a node every few ms."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    nodes, prev = [], "x"
    for i in range(layers):
        nodes.append(helper.make_node("MatMul", [prev, "w"], [f"y{i}"]))
        prev = f"y{i}"
    g = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [n, n])],
        [onnx.numpy_helper.from_array(w, "w")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(m)
    return _cleave.load_bytes(m.SerializeToString(), "chain.onnx"), n


def timed(part, feeds, token=None):
    t = time.perf_counter()
    try:
        part.run(feeds, None, token)
        return time.perf_counter() - t, None
    except Exception as e:  # noqa: BLE001 - the outcome is what is compared
        return time.perf_counter() - t, e


@pytest.mark.parametrize("engine", ["ort", "openvino"])
def test_a_cancelled_request_stops_its_run_and_leaves_the_others_alone(engine):
    model, n = chain()
    part = _cleave.open_part(model, "cpu", engine, 1)
    assert part.engine.split(":")[0] == engine and part.cancellable
    feeds = {"x": np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)}
    whole, err = timed(part, feeds)
    assert err is None
    first = part.run(feeds)

    # Cancelled before it runs: it never starts.
    early = _cleave.Cancel()
    early.cancel()
    took, err = timed(part, feeds, early)
    assert err is not None and "cancelled" in str(err) and took < whole / 4

    # Cancelled while it runs: it stops well before its end.
    mid = _cleave.Cancel()
    threading.Timer(whole / 4, mid.cancel).start()
    took, err = timed(part, feeds, mid)
    assert err is not None and "cancelled" in str(err), err
    assert took < whole * 0.75, (took, whole)

    # A runs; B waits for the part and is cancelled there: A finishes, B never runs.
    a, b = _cleave.Cancel(), _cleave.Cancel()
    got = {}

    def run(key, token):
        got[key] = timed(part, feeds, token)

    ta = threading.Thread(target=run, args=("a", a))
    ta.start()
    time.sleep(whole / 10)
    tb = threading.Thread(target=run, args=("b", b))
    tb.start()
    time.sleep(whole / 10)
    b.cancel()
    ta.join()
    tb.join()
    assert got["a"][1] is None, got["a"]
    assert got["b"][1] is not None and "cancelled" in str(got["b"][1])
    assert not a.cancelled and b.cancelled

    # The part still answers, and the same as before.
    again = part.run(feeds, None, _cleave.Cancel())
    out = part.outputs[0]
    assert np.array_equal(again[out], first[out])


def test_a_cancelled_request_on_an_engine_that_cannot_stop_a_run_does_not_start():
    model, n = chain(n=32, layers=4)
    part = _cleave.open_part(model, "cpu", "tract", 1)
    assert part.engine == "tract" and not part.cancellable
    feeds = {"x": np.ones((n, n), np.float32)}
    token = _cleave.Cancel()
    assert part.run(feeds, None, token)
    token.cancel()
    _, err = timed(part, feeds, token)
    assert err is not None and "cancelled" in str(err)
