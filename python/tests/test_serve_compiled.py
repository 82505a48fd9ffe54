"""The compiled data plane: the parts wired as a Ray Compiled Graph, each sent only what it
reads, its waiting threads, watchdog, and a broken or idle graph rebuilt."""

import asyncio
import os
import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper
from serve_fakes import RayChannelError, in_process_plane, matmuls

from cleave import serve


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


def test_the_compiled_plane_wires_parts_as_a_graph_and_only_wanted_tensors_reach_the_ingress(monkeypatch):
    monkeypatch.setattr(serve.compiled, "WAIT_QUIET_S", 0.05)
    monkeypatch.setattr(serve.actors, "node_report", lambda: {"node_id": "local"})
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
    monkeypatch.setattr(serve.actors, "node_report", lambda: {"node_id": "local"})
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
