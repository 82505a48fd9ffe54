"""A served part on cleave's runtime: its engine, threads, replicas and niceness, a request
that ran out of time, and partitions of each format served and compared with the whole model."""

import asyncio
import concurrent.futures
import os
import pathlib
import time

import numpy as np
import onnx
import pytest
from conftest import test_data as data_root
from serve_fakes import local_app, matmuls, slow_model

import cleave
from cleave import serve


def test_a_request_out_of_time_frees_the_parts_worker(monkeypatch):
    monkeypatch.setattr(serve.actors, "node_report", lambda: {"node_id": "local"})
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
    monkeypatch.setattr(serve.actors, "node_report", lambda: {"node_id": "local"})
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


def test_replicas_and_threads_are_set_per_backend(monkeypatch):
    monkeypatch.setattr(serve.actors, "node_report", lambda: {"node_id": "local"})
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
    cores = serve.actors.usable_cores()
    assert serve.actors.node_threads(1) == cores and serve.actors.node_threads(cores * 2) == 1
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

    monkeypatch.setattr(serve.actors, "node_report", lambda: {"node_id": "local"})
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


def test_a_tflite_partition_with_two_branches_is_served_on_litert_and_equals_the_whole_model(tmp_path, monkeypatch):
    pytest.importorskip("ai_edge_litert")
    monkeypatch.setattr(serve.actors, "node_report", lambda: {"node_id": "local"})
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


@pytest.mark.parametrize("raised", [False, True])
def test_a_part_runs_at_the_niceness_set_for_parts(monkeypatch, raised):
    before = os.getpriority(os.PRIO_PROCESS, 0)
    # One above this thread's: going that way needs no privilege.
    niceness = min(19, before + 1) if raised else None
    monkeypatch.setattr(serve.compiled, "PART_NICENESS", niceness)
    monkeypatch.setattr(serve.actors, "node_report", lambda: {"node_id": "local"})
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
