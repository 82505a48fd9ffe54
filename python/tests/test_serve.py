"""cleave.serve's request handling without a cluster: the .npz reader checks what it unpacks
against what the model takes, and a part gives up a request that ran out of time."""

import asyncio
import io
import struct
import time
import zipfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from cleave import serve


def npz(members):
    """An .npz whose members are raw bytes, deflated (so a header can lie about its data)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name + ".npy", data)
    return buf.getvalue()


def npy_header(descr, shape):
    header = ("{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)).encode() + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header


def npy(a):
    f = io.BytesIO()
    np.save(f, a)
    return f.getvalue()


SPECS = {"x": ["float32", [None, 4]], "ids": ["int64", [2]]}


def test_inputs_are_checked_against_the_model_before_they_are_unpacked():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    ids = np.array([1, 2], np.int64)
    got = serve.read_npz(npz({"x": npy(x), "ids": npy(ids)}), ["x", "ids"], 1 << 20, SPECS)
    np.testing.assert_array_equal(got["x"], x)
    np.testing.assert_array_equal(got["ids"], ids)
    assert got["x"].flags.writeable
    # A dynamic dim takes any size.
    serve.read_npz(npz({"x": npy(np.zeros((7, 4), np.float32)), "ids": npy(ids)}), ["x", "ids"], 1 << 20, SPECS)
    cases = [
        ({"x": npy(x.astype(np.float64))}, "input 'x' is float64, the model takes float32"),
        ({"x": npy(np.zeros((3, 5), np.float32))}, "input 'x' has shape [3, 5], the model takes [?, 4]"),
        ({"x": npy(np.zeros((3, 4, 1), np.float32))}, "has shape [3, 4, 1]"),
        ({"ids": npy(np.zeros(3, np.int64))}, "input 'ids' has shape [3], the model takes [2]"),
        # A header declaring 4 TiB: refused from the header, nothing allocated.
        ({"x": npy_header("<f4", "(274877906944, 4)")}, "more than 1048576 bytes"),
        # Data shorter than the header says.
        ({"x": npy_header("<f4", "(3, 4)") + b"\0" * 20}, "ends after 20 of the 48 bytes"),
        ({"x": b"not an npy at all"}, "x.npy is not an .npy file"),
    ]
    for members, message in cases:
        with pytest.raises(ValueError) as e:
            serve.read_npz(npz(members), ["x", "ids"], 1 << 20, SPECS)
        assert message in str(e.value), (message, str(e.value))
    with pytest.raises(ValueError, match="Python objects"):
        serve.read_npz(npz({"x": npy_header("|O", "(2,)")}), ["x"], 1 << 20)


def slow_model(n=512, layers=150):
    """x @ w, `layers` times: seconds of work on one thread, a node boundary every few ms."""
    nodes, prev = [], "x"
    for i in range(layers):
        nodes.append(helper.make_node("MatMul", [prev, "w"], [f"y{i}"]))
        prev = f"y{i}"
    w = helper.make_tensor("w", TensorProto.FLOAT, [n, n], (np.eye(n, dtype=np.float32)).ravel())
    g = helper.make_graph(
        nodes,
        "slow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [n, n])],
        [w],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(m)
    return m.SerializeToString(), prev


def test_a_request_out_of_time_frees_the_parts_worker(monkeypatch):
    monkeypatch.setattr(serve, "_node_report", lambda: {"node_id": "local"})
    # About a second here: 150 layers took 0.30 s on a faster machine, too little to tell.
    model, out = slow_model(layers=500)
    spec = {"index": 0, "file": "slow.onnx", "inputs": ["x"], "outputs": [out], "backend": "cpu", "deployment": "part1_cpu"}
    part = serve.PartReplica(spec, model, {})
    assert part.inputs() == {"x": ["float32", [512, 512]]}
    x = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)

    t = time.perf_counter()
    r = asyncio.run(part({"x": x}))
    whole = time.perf_counter() - t
    np.testing.assert_allclose(r["outputs"][out], x, rtol=1e-5)
    assert whole > 0.3, f"the model is too fast to tell ({whole:.2f}s)"

    async def give_up():
        with pytest.raises(asyncio.TimeoutError):
            await part({"x": x}, whole / 10)
        t = time.perf_counter()
        # The worker is free again long before the abandoned run would have ended.
        await asyncio.get_running_loop().run_in_executor(part.pool, lambda: None)
        return time.perf_counter() - t

    freed_after = asyncio.run(give_up())
    assert freed_after < whole / 3, f"worker busy {freed_after:.2f}s after giving up (a whole run takes {whole:.2f}s)"


def test_a_part_recorded_for_openvino_runs_on_it_and_says_so(monkeypatch):
    pytest.importorskip("openvino")
    monkeypatch.setattr(serve, "_node_report", lambda: {"node_id": "local"})
    model, out = slow_model(n=64, layers=3)
    rng = np.random.default_rng(1)
    w = rng.standard_normal((64, 64)).astype(np.float32)
    m = onnx.load_from_string(model)
    m.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(w, "w"))
    model = m.SerializeToString()
    base = {"index": 0, "file": "p.onnx", "inputs": ["x"], "outputs": [out], "backend": "ov-CPU", "deployment": "part1_ov-CPU"}
    ov_part = serve.PartReplica({**base, "engine": "openvino:CPU"}, model, {})
    ort_part = serve.PartReplica({**base, "engine": None}, model, {})
    assert ov_part.describe()["engine"] == "openvino:CPU"
    assert ort_part.describe()["engine"] == "onnxruntime:CPUExecutionProvider"
    assert ov_part.inputs() == ort_part.inputs() == {"x": ["float32", [64, 64]]}
    x = rng.standard_normal((64, 64)).astype(np.float32)
    got = asyncio.run(ov_part({"x": x}))["outputs"][out]
    want = asyncio.run(ort_part({"x": x}))["outputs"][out]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, x @ w @ w @ w, rtol=1e-3, atol=1e-2)


def test_the_body_limit_follows_the_inputs_declared_sizes():
    limit, why = serve.body_limit({"x": ["float32", [2, 4]], "ids": ["int64", [3]]}, ["x", "ids"])
    assert limit == 8 * (2 * 4 * 4 + 3 * 8) + 2 * 4096 + 65536 and "declare" in why
    # A dynamic dim or an unknown input: the configured bound.
    assert serve.body_limit(SPECS, ["x", "ids"]) == (serve.MAX_BODY_BYTES, "CLEAVE_MAX_BODY_BYTES")
    assert serve.body_limit({}, ["x"])[0] == serve.MAX_BODY_BYTES
    # An archive of exactly the declared inputs fits under it.
    x, ids = np.zeros((2, 4), np.float32), np.arange(3, dtype=np.int64)
    body = serve.write_npz({"x": x, "ids": ids})
    assert len(body) < limit
