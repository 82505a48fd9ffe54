"""Fakes and models the serving tests share: .npz bodies, slow models, Serve handles and an
in-process compiled graph, without a cluster."""

import asyncio
import concurrent.futures
import io
import struct
import time
import zipfile

import numpy as np
import onnx
from onnx import TensorProto, helper

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


def local_app(conn, threads=None):
    """The application of `conn` with its parts behind FakeHandles: (ingress, parts, handles)."""
    partition = serve.Partition(conn)
    opts = serve.actor_options(partition)
    specs = serve.part_specs(partition, opts, threads)
    parts = [serve.PartReplica(s, None, opts[s["deployment"]]) for s in specs]
    handles = [FakeHandle(p, []) for p in parts]
    return partition, serve.Ingress(serve.ingress_meta(partition, specs, "t", "-"), 60, {"kind": "handles"}, *handles), parts, handles


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


class RayChannelError(Exception):
    """Named as Ray's: the plane knows Ray's errors by name."""


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
