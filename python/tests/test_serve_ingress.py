"""The ingress: its own HTTP listener, the hops it times, its port, and a running application
that is slow to describe itself."""

import asyncio
import io
import threading
import time

import numpy as np
import pytest
from serve_fakes import FakeHandle, matmuls

from cleave import serve


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


def test_the_ingress_answers_http_itself_as_serves_route_does(monkeypatch):
    pytest.importorskip("uvicorn")
    import http.client
    import json

    monkeypatch.setattr(serve.actors, "node_report", lambda: {"node_id": "local"})
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


def test_ingress_port_values():
    assert serve.parse_ingress_port("0") == 0
    assert serve.parse_ingress_port("8123") == 8123
    assert serve.parse_ingress_port("OFF") is None
    for bad in ("-1", "65536", "eighty", ""):
        with pytest.raises(ValueError, match="--ingress-port"):
            serve.parse_ingress_port(bad)


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
