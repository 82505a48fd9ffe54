"""cleave.serve's request handling without a cluster: the .npz reader checks what it unpacks
against what the model takes, and a part gives up a request that ran out of time."""

import asyncio
import concurrent.futures
import io
import os
import pathlib
import struct
import threading
import time
import zipfile

import numpy as np
import onnx
import pytest
from conftest import test_data as data_root
from onnx import TensorProto, helper

import cleave
from cleave import serve


def npz(members, how=zipfile.ZIP_DEFLATED):
    """An .npz whose members are raw bytes, deflated or stored (so a header can lie about its
    data either way)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", how) as z:
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
    for how in (zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED):
        for members, message in cases:
            with pytest.raises(ValueError) as e:
                serve.read_npz(npz(members, how), ["x", "ids"], 1 << 20, SPECS)
            assert message in str(e.value), (how, message, str(e.value))
        with pytest.raises(ValueError, match="Python objects"):
            serve.read_npz(npz({"x": npy_header("|O", "(2,)")}, how), ["x"], 1 << 20)
    # Cut short mid-member: the directory is gone, and zipfile says so.
    with pytest.raises(zipfile.BadZipFile):
        serve.read_npz(npz({"x": npy(x)}, zipfile.ZIP_STORED)[:100], ["x"], 1 << 20, SPECS)


def test_a_stored_member_is_read_over_the_bodys_bytes_where_aligned_and_copied_once_where_not():
    x = np.random.default_rng(3).standard_normal((3, 4))
    # 30 bytes of zip header, the 10 of the name and numpy's 128 of .npy header: the data
    # lies at byte 168 of the body, aligned for float64; under the name "x.npy" at 163.
    aligned = serve.read_npz(npz({"abcdef": npy(x)}, zipfile.ZIP_STORED), ["abcdef"], 1 << 20)["abcdef"]
    moved = serve.read_npz(npz({"x": npy(x)}, zipfile.ZIP_STORED), ["x"], 1 << 20)["x"]
    np.testing.assert_array_equal(aligned, x)
    np.testing.assert_array_equal(moved, x)
    assert not aligned.flags.owndata and not aligned.flags.writeable
    assert moved.flags.owndata and moved.flags.aligned
    # What write_npz writes, np.load reads, and back: 0-d, empty, Fortran-ordered, structured.
    for a in [np.array(2.5), np.zeros((0, 3), np.float32), np.asfortranarray(x), np.zeros(2, [("a", "<f4"), ("b", "<i2")]),
              x[:, ::2]]:
        body = serve.write_npz({"t": a})
        for got in (np.load(io.BytesIO(body))["t"], serve.read_npz(body, ["t"], 1 << 20)["t"]):
            assert got.dtype == a.dtype and got.shape == a.shape and (got == a).all()


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
    monkeypatch.setattr(serve.placement, "node_report", lambda: {"node_id": "local"})
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
    monkeypatch.setattr(serve.placement, "node_report", lambda: {"node_id": "local"})
    model, out = slow_model(n=64, layers=3)
    rng = np.random.default_rng(1)
    w = rng.standard_normal((64, 64)).astype(np.float32)
    m = onnx.load_from_string(model)
    m.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(w, "w"))
    model = m.SerializeToString()
    base = {"index": 0, "file": "p.onnx", "inputs": ["x"], "outputs": [out], "backend": "ov-CPU", "deployment": "part1_ov-CPU"}
    ov_part = serve.PartReplica({**base, "engine": "openvino:CPU"}, model, {})
    # Nothing recorded, on a backend that names no engine: ONNX Runtime, the first of ONNX's.
    ort_part = serve.PartReplica({**base, "backend": "cpu", "engine": None}, model, {})
    assert ov_part.describe()["engine"] == "openvino:CPU"
    assert ort_part.describe()["engine"] == "ort"
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


class FakeResponse:
    """What a DeploymentHandle call gives: started at once, awaitable, cancellable. Awaiting it
    counts as the ingress fetching the result; parts reach their upstream through `task`."""

    def __init__(self, make):
        self.task = asyncio.ensure_future(make())
        self.fetched = 0

    def __await__(self):
        self.fetched += 1
        return self.task.__await__()

    def cancel(self):
        self.task.cancel()


class FakeMethod:
    """A handle's method without arguments (``inputs``, ``describe``): `.remote()` answers `f()`."""

    def __init__(self, f):
        self.f = f

    def remote(self):
        async def call():
            return self.f()

        return FakeResponse(call)


class FakeHandle:
    """A part behind a handle, resolving responses passed as arguments as Ray Serve does."""

    def __init__(self, part, log):
        self.part, self.log = part, log
        self.calls = []

        self.inputs = FakeMethod(part.inputs)
        self.describe = FakeMethod(part.describe)

    def remote(self, *args):
        async def run():
            resolved = [await a.task if isinstance(a, FakeResponse) else a for a in args]
            t = time.perf_counter()
            r = await self.part(*resolved)
            self.log.append((self.part.spec["deployment"], t, time.perf_counter()))
            return r

        r = FakeResponse(run)
        self.calls.append(r)
        return r


def matmuls(inp, out, n, layers, w):
    nodes, prev = [], inp
    for i in range(layers):
        nxt = out if i == layers - 1 else f"{out}_{i}"
        nodes.append(helper.make_node("MatMul", [prev, "w"], [nxt]))
        prev = nxt
    g = helper.make_graph(nodes, out, [helper.make_tensor_value_info(inp, TensorProto.FLOAT, [n, n])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, [n, n])],
                          [helper.make_tensor("w", TensorProto.FLOAT, [n, n], w.ravel())])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def test_parts_that_do_not_depend_on_each_other_run_at_once_and_tensors_skip_the_ingress(monkeypatch):
    monkeypatch.setattr(serve.placement, "node_report", lambda: {"node_id": "local"})
    n, layers = 256, 200
    rng = np.random.default_rng(2)
    wa = (np.eye(n) + 1e-3 * rng.standard_normal((n, n))).astype(np.float32)
    wb = (np.eye(n) + 1e-3 * rng.standard_normal((n, n))).astype(np.float32)
    add = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "add",
                            [helper.make_tensor_value_info(t, TensorProto.FLOAT, [n, n]) for t in "ab"],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])])
    models = [matmuls("x", "a", n, layers, wa), matmuls("x", "b", n, layers, wb),
              helper.make_model(add, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()]
    specs = [{"index": i + 1, "file": f"p{i}.onnx", "inputs": ins, "outputs": outs, "backend": b,
              "deployment": f"part{i + 1}_{b}"}
             for i, (ins, outs, b) in enumerate([(["x"], ["a"], "npu"), (["x"], ["b"], "gpu"), (["a", "b"], ["y"], "cpu")])]
    log = []
    handles = [FakeHandle(serve.PartReplica(s, m, {}), log) for s, m in zip(specs, models)]
    meta = {"name": "t", "digest": "-", "inputs": ["x"], "outputs": ["y"],
            "parts": [{k: s[k] for k in ("inputs", "outputs", "backend", "deployment")} for s in specs]}
    ingress = serve.Ingress(meta, 60, {"kind": "handles"}, *handles)
    x = rng.standard_normal((n, n)).astype(np.float32)

    r = asyncio.run(ingress.infer({"x": x}))
    # The ingress received the graph output and nothing else.
    assert ingress.received == {"y": 1}
    want = x @ np.linalg.matrix_power(wa.astype(np.float64), layers) + x @ np.linalg.matrix_power(wb.astype(np.float64), layers)
    np.testing.assert_allclose(r["outputs"]["y"], want, rtol=1e-3, atol=1e-3)
    assert [p["deployment"] for p in r["parts"]] == ["part1_npu", "part2_gpu", "part3_cpu"]
    # Only the last part answered to the ingress; a and b went from part to part.
    assert [sum(c.fetched for c in h.calls) for h in handles] == [0, 0, 1]
    # The two branches overlapped in time: each ran while the other did.
    spans = {name: (t0, t1) for name, t0, t1 in log}
    (a0, a1), (b0, b1) = spans["part1_npu"], spans["part2_gpu"]
    assert a0 < b1 and b0 < a1, spans
    assert max(a1, b1) - min(a0, b0) < (a1 - a0) + (b1 - b0), spans
    # Asked for, the boundaries come back too (every part answers then).
    r = asyncio.run(ingress.infer({"x": x}, boundaries=True))
    assert set(r["boundaries"]) == {"a", "b", "y"}
    # A failing part is named, though the ingress only hears of it through the last part.
    bad = serve.Ingress(meta, 60, {"kind": "handles"}, handles[0], handles[1], FakeHandle(serve.PartReplica(specs[2], models[0], {}), log))
    with pytest.raises(RuntimeError, match="part3_cpu .backend cpu. "):
        asyncio.run(bad.infer({"x": x}))


def local_app(conn, threads=None):
    """The application of `conn` with its parts behind FakeHandles: (ingress, parts, handles)."""
    partition = serve.Partition(conn)
    opts = serve.actor_options(partition)
    specs = serve.part_specs(partition, opts, threads)
    parts = [serve.PartReplica(s, None, opts[s["deployment"]]) for s in specs]
    handles = [FakeHandle(p, []) for p in parts]
    return partition, serve.Ingress(serve.ingress_meta(partition, specs, "t", "-"), 60, {"kind": "handles"}, *handles), parts, handles


def test_a_tflite_partition_with_two_branches_is_served_on_litert_and_equals_the_whole_model(tmp_path, monkeypatch):
    pytest.importorskip("ai_edge_litert")
    monkeypatch.setattr(serve.placement, "node_report", lambda: {"node_id": "local"})
    model = data_root() / "tflite" / "face_detection_full_range.tflite"
    if not model.is_file():
        pytest.fail(f"{model} missing: run `bash scripts/testdata/fetch-test-data.sh`")
    # The detector's upsampling and its two output reshapes on the cpu: 9 parts, the last two
    # side by side (each reads one of part 7's outputs), so the parts form a graph, not a chain.
    rules = {"backends": ["npu", "cpu"], "default": "npu", "comply": "opcode",
             "OPCODE": {"RESIZE_BILINEAR": "cpu", "CONCATENATION": "cpu", "RESHAPE": "cpu"}}
    conn = cleave.load(model).partition(rules=rules).save(tmp_path / "out")
    partition, ingress, parts, handles = local_app(conn, {"npu": 2})
    assert len(parts) == 9 and all(p.spec["format"] == "tflite" for p in parts)
    last, other = partition.parts[-1], partition.parts[-2]
    assert not set(last["inputs"]) & set(other["outputs"]) and not set(other["inputs"]) & set(last["outputs"])
    for p in parts:
        d = p.describe()
        assert d["engine"] == "litert", d
        assert d["threads"] == (2 if p.spec["backend"] == "npu" else 1), d
    feeds = serve.random_feeds(partition.source_file, partition, 5)
    assert feeds["input"].shape == (1, 192, 192, 3) and feeds["input"].std() > 0.5
    names = list(dict.fromkeys(partition.outputs + [n for p in partition.parts for n in p["outputs"]]))
    assert len(names) == 13
    want = serve.reference_run(partition.source_file, feeds, names)

    r = asyncio.run(ingress.infer(feeds, boundaries=True))
    got = dict(r["boundaries"], **r["outputs"])
    for n in names:
        a, b = got[n].astype(np.float64), want[n].astype(np.float64)
        assert a.shape == b.shape, n
        # LiteRT on both sides, the same kernels: equal up to rounding.
        assert np.linalg.norm(a - b) <= 1e-5 * np.linalg.norm(b), (n, np.abs(a - b).max())
    # Without the boundaries only the last two parts answer the ingress, with the outputs.
    fetched = [sum(c.fetched for c in h.calls) for h in handles]
    asyncio.run(ingress.infer(feeds))
    again = [sum(c.fetched for c in h.calls) - f for h, f in zip(handles, fetched)]
    assert again == [0] * 7 + [1, 1], again
    boundary = [n for n in names if n not in partition.outputs]
    assert all(ingress.received[n] == 1 for n in boundary), ingress.received
    assert all(ingress.received[n] == 2 for n in partition.outputs), ingress.received


def test_replicas_and_threads_are_set_per_backend(monkeypatch):
    monkeypatch.setattr(serve.placement, "node_report", lambda: {"node_id": "local"})
    assert serve.parse_per_backend("cpu=2, npu=1,*=3", "replicas") == {"cpu": 2, "npu": 1, "*": 3}
    assert serve.parse_per_backend("4", "threads") == {"*": 4}
    assert serve.parse_per_backend(None, "threads") == {}
    for bad, why in (("cpu=0", "at least 1"), ("cpu=two", "not a whole number"), ("=2", "backend name")):
        with pytest.raises(ValueError, match=why):
            serve.parse_per_backend(bad, "replicas")
    assert serve.per_backend_value({"cpu": 2, "*": 3}, "npu", 1) == 3
    assert serve.per_backend_value({"cpu": 2}, "npu", 1) == 1
    # A GPU's share follows the replicas on it: two parts with two replicas each share one.
    class P:
        parts = [{"backend": "gpu0", "deployment": "part1_gpu0"}, {"backend": "gpu0", "deployment": "part2_gpu0"}]
    opts = serve.actor_options(P(), None, {"gpu0": 2})
    assert opts["part1_gpu0"]["num_gpus"] == 0.25
    # Threads default to the CPUs a part reserves, else to its share of its node's cores.
    assert serve.default_threads({"num_cpus": 3}) == 3 and serve.default_threads({}) == 0
    cores = serve.placement.usable_cores()
    assert serve.placement.node_threads(1) == cores and serve.placement.node_threads(cores * 2) == 1
    model, out = slow_model(n=8, layers=2)
    spec = {"index": 1, "file": "p.onnx", "inputs": ["x"], "outputs": [out], "backend": "cpu",
            "deployment": "part1_cpu", "format": "onnx", "threads": 3}
    part = serve.PartReplica(spec, model, {})
    assert part.describe()["threads"] == 3 and part.describe()["engine"] == "ort"
    # Nothing given: a 1-stage deployment's one part takes every core, two parts half each.
    alone = serve.PartReplica({**spec, "threads": 0, "share": 1}, model, {})
    assert alone.describe()["threads"] == cores
    two = serve.PartReplica({**spec, "threads": 0, "share": 2}, model, {})
    assert two.describe()["threads"] == max(1, cores // 2)


def test_a_gpu_part_says_where_it_runs():
    model, out = slow_model(n=8, layers=2)
    spec = {"index": 1, "file": "p.onnx", "inputs": ["x"], "outputs": [out], "backend": "gpu0",
            "deployment": "part1_gpu0", "format": "onnx"}
    part = serve.open_part(spec, model)
    assert part.engine == "ort"
    # ONNX Runtime is asked for its CUDA provider; the CPU-only wheel has none, and says so.
    assert "gpu0" in part.note and "runs on the CPU" in part.note and "onnxruntime-gpu" in part.note, part.note
    on_tract = serve.open_part({**spec, "engine": "tract"}, model)
    assert "runs on the CPU" in on_tract.note and "--engine gpu0=ENGINE:DEVICE" in on_tract.note, on_tract.note
    cpu = serve.open_part({**spec, "backend": "cpu"}, model)
    assert cpu.note is None


def test_circle_parts_are_served_on_onert_as_litert_serves_their_tflite_twins(tmp_path, monkeypatch):
    pytest.importorskip("onert")
    pytest.importorskip("ai_edge_litert")
    import subprocess
    import sys

    monkeypatch.setattr(serve.placement, "node_report", lambda: {"node_id": "local"})
    model = data_root() / "tflite" / "face_landmark.tflite"
    if not model.is_file():
        pytest.fail(f"{model} missing: run `bash scripts/testdata/fetch-test-data.sh`")
    circle = tmp_path / "fl.circle"
    cli = str(pathlib.Path(sys.executable).parent / "cleave")
    subprocess.run([cli, "convert", str(model), str(circle)], check=True)
    # onert lacks PRELU: the npu parts (everything else) are the ones compared.
    rules = {"backends": ["npu", "host"], "default": "npu", "comply": "opcode", "OPCODE": {"PRELU": "host"}}
    tfl = serve.Partition(cleave.load(model).partition(rules=rules).save(tmp_path / "tflite"))
    cir = serve.Partition(cleave.load(circle).partition(rules=rules).save(tmp_path / "circle"))
    assert [p["format"] for p in cir.parts] == ["circle"] * len(cir.parts)
    rng = np.random.default_rng(7)
    compared = 0
    for a, b in zip(cir.parts, tfl.parts):
        if a["backend"] != "npu":
            continue
        with open(a["file"], "rb") as f:
            data = f.read()
        on_onert = serve.open_part(a, data if a["index"] % 2 else a["file"])
        on_litert = serve.open_part(b, b["file"])
        assert on_onert.engine == "onert:cpu"
        # The file's own order of inputs and outputs, as LiteRT reads it from the twin.
        assert [i[0] for i in on_onert.part.inputs] == [i[0] for i in on_litert.part.inputs], a["file"]
        assert on_onert.outputs == on_litert.outputs, a["file"]
        specs = on_onert.input_specs()
        assert specs == on_litert.input_specs()
        feeds = {n: rng.standard_normal(dims).astype(dt) for n, (dt, dims) in specs.items()}
        outs = list(reversed(a["outputs"]))
        got = on_onert.run(outs, feeds, on_onert.run_options())
        want = on_litert.run(outs, feeds, on_litert.run_options())
        for n, g, w in zip(outs, got, want):
            assert g.shape == w.shape, n
            assert np.linalg.norm(g - w) <= 1e-5 * np.linalg.norm(w), (n, np.abs(g - w).max())
            compared += 1
    assert compared >= 20, compared




class InProcessGraph:
    """What a Ray Compiled Graph of PartWorkers computes, run in this process in the order
    the plane bound the parts: each execution's results as futures, one per part."""

    def __init__(self, plane, workers):
        self.plane, self.workers = plane, workers
        self.executions = 0
        # One thread runs every part, as each actor's loop runs on a thread of its own.
        self.loop_thread = concurrent.futures.ThreadPoolExecutor(max_workers=1)

    async def execute_async(self, *requests):
        self.executions += 1
        self.requests = requests
        up = await asyncio.get_running_loop().run_in_executor(self.loop_thread, self._run, list(requests))
        futures = []
        for u in up:
            f = asyncio.get_running_loop().create_future()
            (f.set_exception if isinstance(u, Exception) else f.set_result)(u)
            futures.append(f)
        return futures

    def _run(self, requests):
        down, up = [None] * len(self.workers), []
        for i, w in enumerate(self.workers):
            # The graph's inputs in order, one per part that reads the request.
            request = requests.pop(0) if self.plane.reads_request[i] else None
            args = [request] + [down[j] for j in self.plane.upstream[i]]
            consumers, read = self.plane.consumers[i], self.plane.read[i]
            failed = [x for x in args if isinstance(x, Exception)]
            try:
                if failed:  # Ray hands an upstream error on without calling the part
                    raise failed[0]
                r = w.step(*args)
            except Exception as e:  # the graph hands an error on to whoever reads it
                r = (e, e) if consumers and read else e
            if isinstance(r, Exception):
                d, u = (r if consumers else None), (r if read else None)
            elif consumers:
                d, u = r if read else (r, None)
            else:
                d, u = None, r
            if isinstance(d, Exception) and u is not None and not isinstance(u, Exception):
                u = d
            down[i] = d
            if u is not None:
                up.append(u)
        return up


def test_threads_waiting_on_a_compiled_graph_go_idle_once_quiet_and_back_with_work(monkeypatch):
    monkeypatch.setattr(serve.compiled, "WAIT_QUIET_S", 0.05)
    go = threading.Event()
    reader = threading.Thread(target=go.wait, name=serve.compiled._RESULT_READER_THREAD + "_0")
    other = threading.Thread(target=go.wait, name="someone_else")
    reader.start()
    other.start()
    try:
        assert serve.compiled._result_reader_tids() == [reader.native_id]
        can = serve.compiled._can_leave_idle()
        policy = serve.compiled.QuietPolicy(lambda: [reader.native_id], can)
        policy.begin()
        policy.end()
        policy.begin()  # work again before the quiet time: the first timer must not demote it
        time.sleep(0.3)
        assert os.sched_getscheduler(reader.native_id) == os.SCHED_OTHER and not policy.idle
        policy.end()
        time.sleep(0.3)
        # Going idle needs no privilege.
        assert os.sched_getscheduler(reader.native_id) == os.SCHED_IDLE and policy.idle
        assert os.sched_getscheduler(other.native_id) == os.SCHED_OTHER
        policy.begin()
        # Coming back does, where RLIMIT_NICE is low and CAP_SYS_NICE missing.
        want = os.SCHED_OTHER if can else os.SCHED_IDLE
        assert os.sched_getscheduler(reader.native_id) == want and policy.idle == (not can)
    finally:
        go.set()
        reader.join()
        other.join()


def in_process_plane(monkeypatch, meta, specs, models):
    """An Ingress on the compiled plane whose graph runs here instead of on Ray actors."""
    # The workers are made on this thread: it keeps its niceness.
    monkeypatch.setattr(serve.compiled, "PART_NICENESS", None)
    async def build(self, lane, first):
        workers = [serve.PartWorker(s, m, meta["outputs"], self.consumers[i], self.read[i]) for i, (s, m) in enumerate(zip(specs, models))]
        infos = [w.ready() for w in workers]
        graph = InProcessGraph(self, workers)
        await self._first_run(graph)
        lane.update(actors=workers, graph=graph, reports=[x["report"] for x in infos])
        self.node_id = "local"
        self.specs = {n: s for x in infos for n, s in x["inputs"].items() if n in meta["inputs"]}
        self.state = "ready"

    monkeypatch.setattr(serve.CompiledPlane, "_build", build)
    plane = {"kind": "compiled", "lanes": 1, "inflight": 4, "workers": [(s, m, {}) for s, m in zip(specs, models)]}
    return serve.Ingress(meta, 60, plane)


def test_the_compiled_plane_wires_parts_as_a_graph_and_only_wanted_tensors_reach_the_ingress(monkeypatch):
    monkeypatch.setattr(serve.compiled, "WAIT_QUIET_S", 0.05)
    monkeypatch.setattr(serve.placement, "node_report", lambda: {"node_id": "local"})
    n = 64
    rng = np.random.default_rng(4)
    ws = [(np.eye(n) + 0.05 * rng.standard_normal((n, n))).astype(np.float32) for _ in range(3)]
    # a = x@w0 and b = x@w1 side by side, y = a + b after them: a graph, not a chain.
    add = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "add",
                            [helper.make_tensor_value_info(t, TensorProto.FLOAT, [n, n]) for t in "ab"],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])])
    models = [matmuls("x", "a", n, 1, ws[0]), matmuls("x", "b", n, 1, ws[1]),
              helper.make_model(add, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()]
    specs = [{"index": i + 1, "file": f"p{i}.onnx", "inputs": ins, "outputs": outs, "backend": b, "deployment": f"part{i + 1}_{b}",
              "format": "onnx", "engine": None}
             for i, (ins, outs, b) in enumerate([(["x"], ["a"], "npu"), (["x"], ["b"], "gpu"), (["a", "b"], ["y"], "cpu")])]
    meta = {"name": "t", "digest": "-", "inputs": ["x"], "outputs": ["y", "a"],
            "parts": [{k: s[k] for k in ("inputs", "outputs", "backend", "deployment")} for s in specs]}
    ingress = in_process_plane(monkeypatch, meta, specs, models)
    plane = ingress.plane
    assert plane.upstream == [[], [], [0, 1]] and plane.consumers == [True, True, False]
    assert plane.reads_request == [True, True, False]
    # Part 2 gives no graph output and has a consumer: its report reaches the ingress in part 3's.
    assert plane.read == [True, False, True]
    x = rng.standard_normal((n, n)).astype(np.float32)
    a, b = x.astype(np.float64) @ ws[0], x.astype(np.float64) @ ws[1]

    r = asyncio.run(ingress.infer({"x": x}))
    np.testing.assert_allclose(r["outputs"]["y"], a + b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(r["outputs"]["a"], a, rtol=1e-4, atol=1e-4)
    # Graph outputs only: b went from part 2 to part 3 and never to the ingress; a, a graph
    # output that part 3 also reads, reached it once.
    assert ingress.received == {"y": 1, "a": 1}
    assert [p["deployment"] for p in r["parts"]] == ["part1_npu", "part2_gpu", "part3_cpu"]
    assert all(p["compute_s"] > 0 and 0 < p["cpu_s"] <= p["compute_s"] + 1e-3 for p in r["parts"])
    # Each part's inputs took in_s to reach it; only the part whose answer nothing else reads
    # says how long it took to reach the ingress; the clock readings behind them stay inside.
    assert all(0 <= p["in_s"] < 1 and "t_in" not in p and "t_out" not in p for p in r["parts"])
    assert [("out_s" in p) for p in r["parts"]] == [False, False, True] and 0 <= r["parts"][2]["out_s"] < 1
    graph, workers = plane.lanes[0]["graph"], plane.lanes[0]["actors"]
    can = serve.compiled._can_leave_idle()
    assert all(w.ready()["waits_as_idle"] == can for w in workers)
    time.sleep(0.3)
    loop_tid = graph.loop_thread.submit(threading.get_native_id).result()
    # Quiet, the parts' loop thread waits at SCHED_IDLE (Ray's channel reads spin there) where
    # it may come back, and it runs each part at the normal policy.
    assert os.sched_getscheduler(loop_tid) == (os.SCHED_IDLE if can else os.SCHED_OTHER)
    policies = []
    for w in workers:
        w.session.run = lambda *a, run=w.session.run: (policies.append(os.sched_getscheduler(0)), run(*a))[1]
    r = asyncio.run(ingress.infer({"x": x}, boundaries=True))
    assert policies == [os.SCHED_OTHER] * 3, policies
    np.testing.assert_allclose(r["boundaries"]["b"], b, rtol=1e-4, atol=1e-4)
    d = asyncio.run(ingress.describe())
    assert d["data_plane"]["kind"] == "compiled" and d["data_plane"]["state"] == "ready", d
    assert [p["deployment"] for p in d["parts"]] == ["part1_npu", "part2_gpu", "part3_cpu"]
    # Out of time before a part starts: it does not run, and the request says so.
    with pytest.raises(TimeoutError, match="did not start: the request was out of time"):
        asyncio.run(ingress.plane.run({"x": x}, False, time.monotonic() - 1.0, 60))
    # A wrong dtype is the client's error, before any part runs.
    runs = plane.lanes[0]["graph"].executions
    with pytest.raises(ValueError, match="'x'"):
        asyncio.run(ingress.infer({"x": x.astype(np.float64)}))
    assert plane.lanes[0]["graph"].executions == runs
    # A part that fails is named, though the ingress hears of it through the last part.
    bad = in_process_plane(monkeypatch, meta, specs[:2] + [dict(specs[2])], models[:2] + [models[0]])
    with pytest.raises(RuntimeError, match="part3_cpu .backend cpu. "):
        asyncio.run(bad.infer({"x": x}))
    # So is one the ingress does not read, whose error reaches it through its consumer.
    bad = in_process_plane(monkeypatch, meta, specs, models[:1] + [models[0]] + models[2:])
    with pytest.raises(RuntimeError, match="part2_gpu .backend gpu. failed"):
        asyncio.run(bad.infer({"x": x}))


@pytest.mark.parametrize("raised", [False, True])
def test_a_part_runs_at_the_niceness_set_for_parts(monkeypatch, raised):
    before = os.getpriority(os.PRIO_PROCESS, 0)
    # One above this thread's: going that way needs no privilege.
    niceness = min(19, before + 1) if raised else None
    monkeypatch.setattr(serve.compiled, "PART_NICENESS", niceness)
    monkeypatch.setattr(serve.placement, "node_report", lambda: {"node_id": "local"})
    n = 8
    spec = {"index": 1, "file": "p.onnx", "inputs": ["x"], "outputs": ["y"], "backend": "cpu",
            "deployment": "part1_cpu", "format": "onnx", "engine": None}
    model = matmuls("x", "y", n, 1, np.eye(n, dtype=np.float32))
    x = np.arange(n * n, dtype=np.float32).reshape(n, n)
    # Fresh threads, as an actor's: a thread's niceness outlives the test otherwise.
    with concurrent.futures.ThreadPoolExecutor(1) as made, concurrent.futures.ThreadPoolExecutor(1) as loop:
        worker, at_init = made.submit(
            lambda: (serve.PartWorker(spec, model, ["y"], False), os.getpriority(os.PRIO_PROCESS, 0))).result()
        seen = []
        run = worker.session.run
        worker.session.run = lambda *a: (seen.append(os.getpriority(os.PRIO_PROCESS, 0)), run(*a))[1]
        request = {"ctl": {"deadline": time.time() + 60, "boundaries": False}, "feeds": {"x": x}}
        up = loop.submit(worker.step, request).result()
    np.testing.assert_array_equal(up["outputs"]["y"], x)
    want = before if niceness is None else niceness
    assert (at_init, seen, worker.ready()["niceness"]) == (want, [want], want)
    assert os.getpriority(os.PRIO_PROCESS, 0) == before


def test_each_part_on_the_compiled_plane_is_sent_only_the_graph_inputs_it_reads():
    # Part 1 reads x, part 2 reads part 1's a and the graph input z, part 3 reads only a.
    meta = {"name": "t", "digest": "-", "inputs": ["x", "z"], "outputs": ["b", "c"],
            "parts": [{"inputs": ["x"], "outputs": ["a"], "backend": "npu", "deployment": "part1_npu"},
                      {"inputs": ["a", "z"], "outputs": ["b"], "backend": "cpu", "deployment": "part2_cpu"},
                      {"inputs": ["a"], "outputs": ["c"], "backend": "cpu", "deployment": "part3_cpu"}]}
    plane = serve.compiled.CompiledPlane(meta, [], 1, 2)
    assert plane.reads_request == [True, True, False]
    x, z = np.zeros((256, 256), np.float32), np.ones(3, np.float32)
    ctl = {"deadline": 0.0, "boundaries": False}
    sent = plane._requests({"x": x, "z": z}, ctl)
    # One request per reading part, in graph order: x to part 1 only, z to part 2 only.
    assert [sorted(r["feeds"]) for r in sent] == [["x"], ["z"]]
    assert sent[0]["feeds"]["x"] is x and all(r["ctl"] is ctl for r in sent)


def test_compiled_plane_refuses_replica_counts_that_differ_between_parts():
    class P:
        parts = [{"backend": "cpu"}, {"backend": "npu"}]
    assert serve.compiled_plane_refusal(P(), {"cpu": 2, "npu": 2}) is None
    assert serve.compiled_plane_refusal(P(), {"*": 3}) is None
    why = serve.compiled_plane_refusal(P(), {"cpu": 2})
    assert why and "different replica counts (1, 2)" in why


def test_the_watchdog_stops_only_runs_past_their_deadline_and_on_time():
    from cleave.serve import compiled

    class Options:
        terminate = False

    dog = compiled.Watchdog()
    late, early, done = Options(), Options(), Options()
    t = time.monotonic()
    # A far deadline first: the thread sleeps towards its next look, and a nearer one armed
    # after it must wake it rather than wait for that look.
    dog.arm(30.0, late)
    dog.arm(0.1, early)
    token = dog.arm(0.1, done)
    dog.disarm(token)  # finished in time: never stopped
    while not early.terminate and time.monotonic() - t < 5:
        time.sleep(0.01)
    assert early.terminate and time.monotonic() - t < compiled.Watchdog.WATCH_STEP_S
    time.sleep(0.2)
    assert not late.terminate and not done.terminate
    assert list(dog.armed) == [1] and dog.thread is not None


def test_the_ingress_times_each_hop_on_the_nodes_clock_and_only_where_it_is_shared():
    from cleave.serve import compiled

    # x -> part1 -> a; x -> part2 -> b; (a, b) -> part3 -> y: part 3 waits for the later of two.
    meta = {"inputs": ["x"], "outputs": ["y"],
            "parts": [{"inputs": ins, "outputs": outs, "backend": "cpu", "deployment": f"part{i + 1}_cpu"}
                      for i, (ins, outs) in enumerate([(["x"], ["a"]), (["x"], ["b"]), (["a", "b"], ["y"])])]}
    plane = compiled.CompiledPlane(meta, [], 1, 2)
    plane.node_id = "n1"

    def reports(nodes):
        stamps = [(10.002, 10.050), (10.003, 10.070), (10.0705, 10.100)]
        return [{"deployment": f"part{i + 1}_cpu", "node_id": n, "t_in": a, "t_out": b}
                for i, ((a, b), n) in enumerate(zip(stamps, nodes))]

    got = reports(["n1"] * 3)
    plane._timeline(got, 10.000, 10.1012)
    assert [r["in_s"] for r in got] == pytest.approx([0.002, 0.003, 0.0005])
    assert [r.get("out_s") for r in got] == [None, None, pytest.approx(0.0012)]
    assert not any("t_in" in r or "t_out" in r for r in got)
    # A part on another node reads another clock: no figure rather than a wrong one.
    got = reports(["n1", "n2", "n1"])
    plane._timeline(got, 10.000, 10.1012)
    assert not any(k in r for r in got for k in ("in_s", "out_s", "t_in", "t_out"))


class RayChannelError(Exception):
    """Named as Ray's: the plane knows Ray's errors by name."""


@pytest.mark.parametrize(
    "error, cause",
    [
        (TypeError("'RayChannelError' object is not iterable"),
         "RayChannelError: a channel closed while the ingress read a result"),
        (RayChannelError("Channel closed."), "RayChannelError: Channel closed."),
    ],
)
def test_a_request_that_meets_a_broken_graph_is_told_so_and_the_lane_is_rebuilt(monkeypatch, error, cause):
    from cleave.serve import compiled

    meta = {"inputs": ["x"], "outputs": ["y"],
            "parts": [{"inputs": ["x"], "outputs": ["y"], "backend": "cpu", "deployment": "part1_cpu"}]}
    plane = compiled.CompiledPlane(meta, [], 1, 2)
    rebuilt = []

    async def rebuild(lane, graph, old):
        rebuilt.append(graph)

    monkeypatch.setattr(plane, "_rebuild", rebuild)

    class Graph:
        async def execute_async(self, *requests):
            async def fail():
                raise error

            return [asyncio.ensure_future(fail())]

    async def go():
        graph = Graph()
        plane.lanes[0].update(graph=graph, slots=asyncio.Semaphore(2), in_flight=2)
        with pytest.raises(RuntimeError) as e:
            await plane.run({"x": np.ones(2, np.float32)}, False, time.monotonic() + 5, 5.0)
        await asyncio.sleep(0)
        return graph, str(e.value), plane.describe()

    graph, message, described = asyncio.run(go())
    assert message == f"the compiled data plane broke ({cause}); it is being rebuilt"
    assert described["state"] == "rebuilding" and described["rebuilds"] == 1
    assert described["last_failure"] == cause and rebuilt == [graph]


def test_an_idle_compiled_plane_releases_its_actors_and_the_next_request_builds_them_again(monkeypatch):
    monkeypatch.setattr(serve.placement, "node_report", lambda: {"node_id": "local"})
    monkeypatch.setattr(serve.compiled, "PLANE_IDLE_S", 0.2)
    n = 16
    w = (np.eye(n) + 0.05 * np.random.default_rng(1).standard_normal((n, n))).astype(np.float32)
    spec = {"index": 1, "file": "p.onnx", "inputs": ["x"], "outputs": ["y"], "backend": "npu", "deployment": "part1_npu",
            "format": "onnx", "engine": None}
    meta = {"name": "t", "digest": "-", "inputs": ["x"], "outputs": ["y"],
            "parts": [{k: spec[k] for k in ("inputs", "outputs", "backend", "deployment")}]}
    ingress = in_process_plane(monkeypatch, meta, [spec], [matmuls("x", "y", n, 1, w)])
    x = np.ones((n, n), np.float32)

    async def go():
        first = await ingress.infer({"x": x})
        await asyncio.sleep(1.5)
        idle = ingress.plane.describe()
        second = await ingress.infer({"x": x})
        return first, idle, second, ingress.plane.describe()

    first, idle, second, after = asyncio.run(go())
    assert idle["state"] == "idle" and idle["idle_releases"] == 1, idle
    assert after["state"] == "ready", after
    np.testing.assert_allclose(second["outputs"]["y"], first["outputs"]["y"])
    np.testing.assert_allclose(first["outputs"]["y"], x @ w, rtol=1e-5)


def test_bench_costs_each_hop_against_the_one_stage_cut_and_rates_against_the_limit():
    from cleave.serve.report import add_costs

    def result(parts, latency, compute, rps):
        return {
            "source": "m.onnx",
            "parts": parts,
            "around_compute_ms": latency - compute,
            "levels": [{"in_flight": 8, "throughput_rps": rps, "cpu_sum_mean_ms": compute + 5.0}],
        }

    one, two, four = result(1, 110.0, 100.0, 9.0), result(2, 115.0, 101.0, 12.0), result(4, 130.0, 104.0, 11.0)
    other = dict(result(2, 50.0, 40.0, 5.0), source="other.onnx")
    add_costs([two, one, four, other], {"m.onnx": {"limit_rps": 20.0}}, 2)
    # ((L_k - C_k) - (L_1 - C_1)) / (k - 1), whatever order the cuts came in.
    assert two["cost_per_hop_ms"] == pytest.approx((14.0 - 10.0) / 1)
    assert four["cost_per_hop_ms"] == pytest.approx((26.0 - 10.0) / 3)
    assert one["cost_per_hop_ms"] is None
    # No 1-stage cut of its model, no limit measured for it: said as unknown, not as zero.
    assert other["cost_per_hop_ms"] is None and other["levels"][0]["of_limit"] is None
    assert [r["levels"][0]["of_limit"] for r in (one, two, four)] == pytest.approx([0.45, 0.6, 0.55])
    # Throughput times the summed compute at that level, over the cores: no limit needed.
    assert other["levels"][0]["parts_computing"] == pytest.approx(5.0 * 0.045 / 2)
    assert four["levels"][0]["parts_computing"] == pytest.approx(11.0 * 0.109 / 2)


def test_bench_splits_the_time_around_the_compute_along_the_graphs_path():
    from cleave.serve.checks import path_at_one

    def parts(hop):
        return [{"compute_s": 0.040, "in_s": 0.001}, {"compute_s": 0.050, "in_s": hop},
                {"compute_s": 0.002, "in_s": hop, "out_s": 0.0008}]

    # Three requests: the medians are the middle one's figures.
    got = path_at_one([0.1, 0.2, 0.1], [parts(0.0005), parts(0.0004), parts(0.0006)])
    assert got["into_graph_ms"] == pytest.approx(1.0)
    assert got["between_parts_ms"] == pytest.approx(1.0) and got["hop_in_run_ms"] == pytest.approx(0.5)
    assert got["out_of_graph_ms"] == pytest.approx(0.8)
    # 100 ms less 92 ms of compute, 2 ms on the way in and between the parts, 0.8 ms back.
    assert got["outside_graph_ms"] == pytest.approx(100 - 92 - 2.0 - 0.8)
    # Parts that did not time the path (the handles plane, another node): no figures at all.
    assert path_at_one([0.1], [[{"compute_s": 0.04}]]) == {}


def test_a_running_application_slow_to_describe_itself_is_asked_again_not_replaced(monkeypatch):
    from cleave.serve import cluster

    class Answer:
        def __init__(self, value):
            self.value = value

        def result(self, timeout_s):
            if isinstance(self.value, Exception):
                raise self.value
            return self.value

    class Handle:
        def __init__(self, answers):
            self.answers = iter(answers)

        @property
        def describe(self):
            return self

        def remote(self):
            return Answer(next(self.answers))

    monkeypatch.setattr(cluster.time, "sleep", lambda s: None)
    slow = [TimeoutError("describe took 30s")] * 2 + [{"digest": "d1"}]
    assert cluster._describe_running(Handle(slow), "app") == {"digest": "d1"}

    def die(code, message):
        raise SystemExit(f"{code}: {message}")

    monkeypatch.setattr(cluster, "die", die)
    monkeypatch.setattr(cluster, "REUSE_DESCRIBE_S", 0.0)
    with pytest.raises(SystemExit, match="2: app: an application of that name is running but did not describe"):
        cluster._describe_running(Handle([TimeoutError("describe took 30s")] * 2), "app")


def test_bench_gives_a_level_up_once_requests_keep_failing():
    from cleave.serve.checks import run_load

    calls = []

    def dead():
        calls.append(1)
        time.sleep(0.01)
        raise TimeoutError("did not answer")

    wall, lat, compute, errors = run_load(dead, 40, 4)
    # Four in flight fail together; no fifth round of them after that.
    assert not lat and 4 <= len(errors) == len(calls) < 8

    answers = iter([RuntimeError("once")] + [[{"compute_s": 0.001}]] * 39)

    def flaky():
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    wall, lat, compute, errors = run_load(flaky, 40, 1)
    assert len(lat) == 39 and len(errors) == 1


def test_the_ingress_answers_http_itself_as_serves_route_does(monkeypatch):
    pytest.importorskip("uvicorn")
    import http.client
    import json

    monkeypatch.setattr(serve.placement, "node_report", lambda: {"node_id": "local"})
    n = 32
    rng = np.random.default_rng(4)
    w = rng.standard_normal((n, n)).astype(np.float32)
    spec = {"index": 1, "file": "p.onnx", "inputs": ["x"], "outputs": ["y"], "backend": "cpu", "deployment": "part1_cpu"}
    handle = FakeHandle(serve.PartReplica(spec, matmuls("x", "y", n, 2, w), {}), [])
    meta = {"name": "t", "digest": "-", "inputs": ["x"], "outputs": ["y"],
            "parts": [{k: spec[k] for k in ("inputs", "outputs", "backend", "deployment")}],
            "listen": {"host": "127.0.0.1", "port": 0}}
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    async def build():  # as Serve builds a replica: on its event loop
        return serve.Ingress(meta, 60, {"kind": "handles"}, handle)

    ingress = asyncio.run_coroutine_threadsafe(build(), loop).result(10)
    try:
        desc = asyncio.run_coroutine_threadsafe(ingress.describe(), loop).result(10)
        route = desc["ingress"]["http"]
        assert route["host"] == "127.0.0.1" and route["port"] > 0 and "error" not in route, route

        def post(body, path="/"):
            for _ in range(50):  # the server task starts on the loop: milliseconds
                conn = http.client.HTTPConnection("127.0.0.1", route["port"], timeout=30)
                try:
                    conn.request("POST", path, body=body, headers={"content-type": "application/octet-stream"})
                    r = conn.getresponse()
                    return r.status, r.read(), r.headers
                except ConnectionRefusedError:
                    time.sleep(0.1)
                finally:
                    conn.close()
            raise AssertionError("the listener never answered")

        x = rng.standard_normal((n, n)).astype(np.float32)
        status, body, headers = post(serve.write_npz({"x": x}), "/t?boundaries=1")
        assert status == 200, body[:300]
        with np.load(io.BytesIO(body), allow_pickle=False) as z:
            got = z["y"]
        want = x.astype(np.float64) @ w @ w
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
        assert [p["deployment"] for p in json.loads(headers["x-cleave-parts"])] == ["part1_cpu"]
        # The client's error is a 400 naming the input, as on Serve's route.
        status, body, _ = post(serve.write_npz({"x": x.astype(np.float64)}))
        assert status == 400 and b"'x'" in body, body[:300]
        # A port that stays in use fails the replica's construction, naming the address.
        monkeypatch.setattr(serve.listener, "REBIND_S", 0.3)
        taken = dict(meta, listen={"host": "127.0.0.1", "port": route["port"]})
        with pytest.raises(RuntimeError, match=f"cannot listen on 127.0.0.1:{route['port']}"):
            serve.Ingress(taken, 60, {"kind": "handles"}, handle)
        # An address this machine does not have: no listener, said; Serve's route still serves.
        elsewhere = serve.Ingress(dict(meta, listen={"host": "192.0.2.1", "port": 0}), 60, {"kind": "handles"}, handle)
        said = asyncio.run_coroutine_threadsafe(elsewhere.describe(), loop).result(10)["ingress"]["http"]
        assert "not an address of the ingress's node" in said["error"], said
        assert serve.cluster.ingress_route({"ingress": {"http": said}}) is None
        # Off, it has no listener and says so.
        off = serve.Ingress(dict(meta, listen=None), 60, {"kind": "handles"}, handle)
        assert asyncio.run_coroutine_threadsafe(off.describe(), loop).result(10)["ingress"]["http"] is None
    finally:
        loop.call_soon_threadsafe(ingress.listener.close)
        time.sleep(0.3)  # uvicorn looks at should_exit every 0.1 s
        loop.call_soon_threadsafe(loop.stop)


def test_a_failed_connection_names_ray_token_authentication(tmp_path, monkeypatch):
    hint = serve.cluster.ray_token_hint
    assert "is the token the cluster's" in hint({"RAY_AUTH_MODE": "token"}, str(tmp_path))
    # Told to connect without a token: nothing to add.
    assert hint({"RAY_AUTH_MODE": "disabled"}, str(tmp_path)) == ""
    # Mode unset: the cluster was asked before connecting, and a token sent if it wanted one.
    monkeypatch.setattr(serve.cluster, "token_probe_available", lambda: True)
    assert hint({}, str(tmp_path)) == ""
    # A Ray that cannot be asked: the hint names what to set.
    monkeypatch.setattr(serve.cluster, "token_probe_available", lambda: False)
    assert "set RAY_AUTH_MODE=token" in hint({}, str(tmp_path)) and "auth_token" not in hint({}, str(tmp_path))
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("t" * 64)
    said = hint({}, str(tmp_path))
    assert str(tmp_path / ".ray" / "auth_token") in said and "RAY_AUTH_MODE=disabled" in said, said


class _FakeRay:
    """Ray's private pieces as ``ray_token`` uses them: a GCS that wants a token or not, a
    token loader that has one or not, and a record of the config being read again."""

    class AuthenticationError(Exception):
        pass

    def __init__(self, wants_token, has_token, unreachable=False):
        fake = self

        class Gcs:
            def __init__(self, address):
                fake.asked = address

            def internal_kv_get(self, key, namespace, timeout):
                if unreachable:
                    raise ConnectionError("no answer")
                if wants_token:
                    raise fake.AuthenticationError("InvalidAuthToken")

        class Loader:
            @staticmethod
            def instance():
                return Loader()

            def has_token(self, ignore_auth_mode):
                return has_token

        class Config:
            @staticmethod
            def initialize(_):
                fake.reinitialized = True

        self.asked = None
        self.reinitialized = False
        self.parts = (Gcs, self.AuthenticationError, Loader, Config)


def test_the_token_is_sent_only_where_the_cluster_asks_for_it():
    send = serve.ray_token.send_token_if_asked
    # The cluster wants a token and one is at hand: token mode, said.
    ray, env = _FakeRay(wants_token=True, has_token=True), {}
    said = send("127.0.0.1:6379", env, ray.parts)
    assert env == {"RAY_AUTH_MODE": "token"} and ray.reinitialized and ray.asked == "127.0.0.1:6379"
    assert said.startswith("note: ") and "asks for a token" in said, said
    # It wants one and none is at hand: an error naming where to put it; the mode untouched.
    ray, env = _FakeRay(wants_token=True, has_token=False), {}
    said = send("127.0.0.1:6379", env, ray.parts)
    assert said.startswith("error: ") and "~/.ray/auth_token" in said and env == {}, said
    # A cluster without authentication, a token on the machine: nothing sent (token mode would
    # break it), nothing said.
    ray, env = _FakeRay(wants_token=False, has_token=True), {}
    assert send("127.0.0.1:6379", env, ray.parts) is None and env == {} and not ray.reinitialized
    # Unreachable: left to ray.init to say.
    ray, env = _FakeRay(wants_token=True, has_token=True, unreachable=True), {}
    assert send("127.0.0.1:6379", env, ray.parts) is None and env == {}
    # A mode the user set is theirs: the cluster is not even asked.
    ray, env = _FakeRay(wants_token=True, has_token=True), {"RAY_AUTH_MODE": "disabled"}
    assert send("127.0.0.1:6379", env, ray.parts) is None and ray.asked is None
    assert env == {"RAY_AUTH_MODE": "disabled"}


def test_ingress_port_values():
    assert serve.parse_ingress_port("0") == 0
    assert serve.parse_ingress_port("8123") == 8123
    assert serve.parse_ingress_port("OFF") is None
    for bad in ("-1", "65536", "eighty", ""):
        with pytest.raises(ValueError, match="--ingress-port"):
            serve.parse_ingress_port(bad)


@pytest.mark.parametrize(
    "enabled, cgroup, subtree, want",
    [
        ("1", "4:cpu,cpuacct:/\n0::/\n", None, True),
        ("1", "4:cpu,cpuacct:/docker/abc\n0::/\n", None, False),
        ("0", "4:cpu,cpuacct:/\n", None, False),
        ("1", "0::/\n", None, True),
        ("1", "0::/user.slice/session-3.scope\n", {"": "memory pids", "user.slice": "memory"}, True),
        ("1", "0::/user.slice/session-3.scope\n", {"": "cpu memory pids", "user.slice": "cpu"}, False),
        ("1", "0::/system.slice/ray.service\n", {"": "memory"}, False),  # unreadable below: not assumed
    ],
)
def test_a_node_shares_its_cores_by_autogroup_only_with_autogroups_on_and_no_cpu_cgroup(tmp_path, enabled, cgroup, subtree, want):
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "sys/kernel").mkdir(parents=True)
    (proc / "self").mkdir()
    (proc / "sys/kernel/sched_autogroup_enabled").write_text(enabled + "\n")
    (proc / "self/cgroup").write_text(cgroup)
    for path, controllers in (subtree or {}).items():
        (root / path).mkdir(parents=True, exist_ok=True)
        (root / path / "cgroup.subtree_control").write_text(controllers + "\n")
    assert serve.placement.shares_cores_by_autogroup(str(proc), str(root)) is want


def test_a_compiled_deployment_on_autogroup_nodes_says_what_its_idling_costs_other_sessions():
    parts = [
        {"deployment": "part1_cpu", "autogroup": True},
        {"deployment": "part2_npu", "autogroup": False},
    ]
    note = serve.cluster.autogroup_note({"data_plane": {"kind": "compiled"}, "parts": parts})
    assert note.startswith("note: the nodes of part1_cpu share their cores") and "part2_npu" not in note
    assert serve.cluster.autogroup_note({"data_plane": {"kind": "handles"}, "parts": parts}) is None
    assert serve.cluster.autogroup_note({"data_plane": {"kind": "compiled"}, "parts": parts[1:]}) is None


def test_random_feeds_take_the_shapes_the_partition_was_cut_for(tmp_path, tiny_cnn, tiny_part):
    # tiny_cnn's batch is a free dim; cut for a batch of 2, the checks send a batch of 2.
    model = cleave.load(tiny_cnn, shape={"input": (2, 3, 16, 16)})
    conn = model.partition(rules=str(tiny_part)).save(tmp_path / "cut")
    partition = serve.Partition(conn)
    assert partition.raw["source"]["shapes"] == {"input": [2, 3, 16, 16]}
    assert serve.random_feeds(partition.source_file, partition, 0)["input"].shape == (2, 3, 16, 16)
    # A partition without the record: free dims taken as 1.
    free = cleave.load(tiny_cnn).partition(rules=str(tiny_part)).save(tmp_path / "free")
    partition = serve.Partition(free)
    assert serve.random_feeds(partition.source_file, partition, 0)["input"].shape == (1, 3, 16, 16)


def test_the_serving_package_imports_its_own_modules_only_at_module_level():
    """Ray ships the package to other nodes by value (cloudpickle), where no package of its name
    exists: a relative import inside a function fails there with ModuleNotFoundError."""
    import ast

    folder = pathlib.Path(serve.__file__).parent
    inside = []
    for f in sorted(folder.glob("*.py")):
        if f.name == "__main__.py":  # run as a script, never shipped
            continue
        for fn in ast.walk(ast.parse(f.read_text())):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inside += [f"{f.name}:{n.lineno}" for n in ast.walk(fn) if isinstance(n, ast.ImportFrom) and n.level]
    assert inside == [], inside
