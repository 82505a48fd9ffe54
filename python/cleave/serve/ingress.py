"""The ingress: the HTTP route and the handle's methods, driving the parts over either data plane;
and ``build_app``, the Ray Serve application of a partition."""

import asyncio
import functools
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from .actors import actor_options, parse_per_backend, per_backend_value
from .compiled import CompiledPlane, compiled_plane_refusal
from .decoder_app import build_decoder_app, is_decoder
from .handles import PART_MAX_ONGOING, PartReplica
from .listener import Listener
from .partition import INLINE_MAX_BYTES, Partition, ingress_meta, part_specs, settings
from .wire import (
    BODY_MIN_RATE,
    BODY_TIMEOUT_S,
    MAX_BODY_BYTES,
    MAX_INFLIGHT_BYTES,
    MAX_UPLOADS_PER_CLIENT,
    Budget,
    Refused,
    body_limit,
    check_input,
    innermost,
    public_parts,
    read_npz,
    reads_inline,
    short_error,
    write_npz,
)

DEFAULT_REQUEST_TIMEOUT_S = 30.0


INGRESS_MAX_ONGOING = 64
# Threads that read request archives (zipfile's directory, inflating), off the event loop: a
# big archive delays only its own request. Few are busy at once: the in-flight budget refuses
# what would unpack past it.
PARSE_THREADS = 4


class _Gone(Exception):
    """The client went away before its body arrived."""


class Ingress:
    """The HTTP route and the handle's methods. It drives the parts over one of two data
    planes (``plane["kind"]``): ``compiled``, actors joined by a Ray Compiled Graph that this
    ingress builds and runs (no part handles), or ``handles``, one Serve deployment per part
    called through its DeploymentHandle (``part_handles``)."""

    def __init__(self, meta, timeout_s, plane, *part_handles):
        self.meta = meta
        self.timeout_s = float(timeout_s)
        self.handles = list(part_handles)
        self.specs = None
        # How many times each tensor reached this process from a part: with the boundaries
        # not asked for, only graph outputs should (the others go part to part).
        self.received = {}
        self.plane_info = {k: v for k, v in plane.items() if k != "workers"}
        self.plane = None
        self.plane_started = False
        # Made here, in the replica: bodies and their arrays held by the requests in flight,
        # on both routes; requests per client address whose bodies are still arriving; the
        # threads that read archives (started on first use).
        self.budget = Budget(MAX_INFLIGHT_BYTES)
        self.uploads = {}
        self.parse_pool = None
        listen = meta.get("listen")
        # Bound here, so that a port in use fails the deployment with the reason.
        self.listener = Listener(listen["host"], listen["port"], self.__call__) if listen else None
        if plane["kind"] == "compiled":
            self.plane = CompiledPlane(meta, plane["workers"], plane["lanes"], plane["inflight"])
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop yet: the first call starts the plane and the listener
        self._listen()
        if self.plane is not None:
            asyncio.get_running_loop().create_task(self._start_plane())

    def _listen(self):
        if self.listener is not None:
            self.listener.start()

    async def check_health(self):
        if self.listener is not None and self.listener.task is not None and self.listener.error:
            # Serve restarts a replica that fails this: a new one listens again.
            raise RuntimeError(f"the ingress's HTTP listener stopped: {self.listener.error}")

    def __del__(self):
        # Serve calls this when it stops the replica: a fixed port is free for the next one.
        listener = getattr(self, "listener", None)
        if listener is not None:
            listener.close()

    async def _start_plane(self):
        if not self.plane_started:
            self.plane_started = True
            await self.plane.start()

    async def _plane_ready(self, deadline):
        """Waits, within the request's time, for the plane's first build."""
        await self._start_plane()
        self.plane.last_used = time.monotonic()
        self.plane.wake()
        if self.plane.unavailable() and self.plane.state == "starting":
            first = [ln["ready"] for ln in self.plane.lanes if ln["ready"] is not None]
            try:
                await asyncio.wait_for(asyncio.shield(asyncio.gather(*first)), max(0.1, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                pass
            except Exception:
                pass  # unavailable() says why
        why = self.plane.unavailable()
        if why:
            raise RuntimeError(why)

    def _start(self, env, deadline):
        """Calls every part at once, each with the graph inputs it reads and the responses of
        the parts it reads from: Ray Serve starts a part when those have answered and moves
        their tensors to it directly, so parts whose inputs are ready run side by side and no
        boundary tensor passes through the ingress. Returns the responses, in part order."""
        producer = {}
        responses = []
        left = deadline - time.monotonic()
        for i, spec in enumerate(self.meta["parts"]):
            direct = {n: env[n] for n in spec["inputs"] if n not in producer}
            upstream = sorted({producer[n] for n in spec["inputs"] if n in producer})
            # Each part gets what is left of the request's time, and stops its own run then.
            responses.append(self.handles[i].remote(direct, left, *(responses[j] for j in upstream)))
            for n in spec["outputs"]:
                producer[n] = i
        return responses

    async def _await(self, responses, wanted, deadline):
        """The results of the parts `wanted` (indices), within the request's time."""
        left = deadline - time.monotonic()
        try:
            return await asyncio.wait_for(asyncio.gather(*(responses[i] for i in wanted)), max(0.1, left + 1.0))
        except asyncio.TimeoutError:
            for r in responses:
                r.cancel()
            names = ", ".join(self.meta["parts"][i]["deployment"] for i in wanted)
            raise TimeoutError(
                f"{names} did not answer within {self.timeout_s:g}s (an actor or node may be down; Serve restarts it "
                "once a node with its resources is up)"
            ) from None
        except Exception as e:
            for r in responses:
                r.cancel()
            if isinstance(innermost(e), asyncio.TimeoutError):
                raise TimeoutError(f"a part gave up: the request ran out of its {self.timeout_s:g}s") from None
            raise RuntimeError(short_error(e)) from None

    async def input_specs(self, deadline):
        """Each graph input's dtype and dims as the part that takes it declares them, asked
        once of the parts and kept."""
        if self.specs is None and self.plane is not None:
            await self._plane_ready(deadline)
            self.specs = self.plane.specs
        if self.specs is None:
            graph_inputs = set(self.meta["inputs"])
            specs = {}
            for i, spec in enumerate(self.meta["parts"]):
                if not graph_inputs.intersection(spec["inputs"]):
                    continue
                resp = self.handles[i].inputs.remote()
                try:
                    got = await asyncio.wait_for(resp, max(0.1, deadline - time.monotonic()))
                except Exception as e:
                    resp.cancel()
                    raise RuntimeError(
                        f"{spec['deployment']} (backend {spec['backend']}) did not say what it takes: "
                        f"{short_error(e) or type(e).__name__}"
                    ) from None
                for name, s in got.items():
                    if name in graph_inputs:
                        specs.setdefault(name, s)
            self.specs = specs
        return self.specs

    async def infer(self, feeds, boundaries=False):
        self._listen()
        missing = [n for n in self.meta["inputs"] if n not in feeds]
        if missing:
            raise ValueError(f"missing graph input {missing[0]!r} (expected {self.meta['inputs']})")
        import numpy as np

        deadline = time.monotonic() + self.timeout_s
        specs = await self.input_specs(deadline)
        env = dict(feeds)
        for name in self.meta["inputs"]:
            env[name] = np.asarray(env[name])
            check_input(name, env[name].dtype, env[name].shape, specs.get(name))
        if self.plane is not None:
            await self._plane_ready(deadline)
            results = await self.plane.run(
                {n: env[n] for n in self.meta["inputs"]}, boundaries, deadline, self.timeout_s
            )
            reports = {}
            for r in results:
                reports[r["report"]["deployment"]] = r["report"]
                env.update(r["outputs"])
                for n in r["outputs"]:
                    self.received[n] = self.received.get(n, 0) + 1
            return self._answer(env, reports, boundaries)
        responses = self._start(env, deadline)
        # Only the parts that give graph outputs answer to the ingress (every part, when the
        # boundaries are asked for); their results carry the others' reports.
        graph_outputs = set(self.meta["outputs"])
        wanted = [
            i for i, spec in enumerate(self.meta["parts"]) if boundaries or graph_outputs.intersection(spec["outputs"])
        ]
        results = await self._await(responses, wanted, deadline)
        reports = {}
        for r in results:
            reports.update(r["parts"])
            env.update(r["outputs"])
            for n in r["outputs"]:
                self.received[n] = self.received.get(n, 0) + 1
        return self._answer(env, reports, boundaries)

    def _answer(self, env, reports, boundaries):
        parts = [reports[spec["deployment"]] for spec in self.meta["parts"] if spec["deployment"] in reports]
        out = {"outputs": {n: env[n] for n in self.meta["outputs"]}, "parts": parts}
        if boundaries:
            out["boundaries"] = {n: env[n] for spec in self.meta["parts"] for n in spec["outputs"]}
        return out

    async def describe(self):
        self._listen()
        deadline = time.monotonic() + self.timeout_s
        if self.plane is not None:
            await self._start_plane()
            # Actors in a compiled graph take no other calls: their reports are those they
            # gave when they came up.
            parts = list(self.plane.part_reports()) or [
                {"deployment": s["deployment"], "backend": s["backend"], "error": self.plane.unavailable() or "not up"}
                for s in self.meta["parts"]
            ]
            return self._described(parts, self.plane.describe())
        parts = []
        for i, spec in enumerate(self.meta["parts"]):
            resp = self.handles[i].describe.remote()
            try:
                parts.append(await asyncio.wait_for(resp, max(0.1, deadline - time.monotonic())))
            except Exception as e:
                resp.cancel()
                parts.append(
                    {
                        "deployment": spec["deployment"],
                        "backend": spec["backend"],
                        "error": short_error(e) or type(e).__name__,
                    }
                )
        return self._described(parts, dict(self.plane_info))

    def _described(self, parts, data_plane):
        return {
            "name": self.meta["name"],
            "digest": self.meta["digest"],
            "inputs": self.meta["inputs"],
            "outputs": self.meta["outputs"],
            "parts": parts,
            "data_plane": data_plane,
            "ingress": {
                "pid": os.getpid(),
                "tensors_received": dict(self.received),
                # The route in this process, no proxy hop: None where --ingress-port off.
                "http": self.listener.describe() if self.listener is not None else None,
            },
        }

    async def __call__(self, request):
        from starlette.responses import JSONResponse, Response

        try:
            specs = await self.input_specs(time.monotonic() + self.timeout_s)
        except Exception as e:
            return JSONResponse({"error": short_error(e)}, status_code=503)
        limit, why = body_limit(specs, self.meta["inputs"])
        lease = self.budget.lease()
        parse = None
        read = False
        try:
            try:
                body = await self._read_body(request, limit, why, lease)
                read = True
                reading = functools.partial(
                    read_npz, body, self.meta["inputs"], min(limit, MAX_BODY_BYTES), specs, why=why, lease=lease
                )
                if reads_inline(body):
                    feeds = reading()
                else:
                    # On a worker thread: zipfile's directory and inflating take the GIL only
                    # in part, and the event loop keeps answering others meanwhile.
                    parse = asyncio.get_running_loop().run_in_executor(self._parse_pool(), reading)
                    del body, reading
                    feeds = await parse
            except Refused as e:
                headers = dict(e.headers)
                if not read:  # the rest of the body is still on the connection
                    headers["connection"] = "close"
                return JSONResponse({"error": str(e)}, status_code=e.status, headers=headers)
            except _Gone:
                return Response(status_code=400)
            except ValueError as e:
                return JSONResponse({"error": str(e)}, status_code=400)
            except Exception as e:
                return JSONResponse(
                    {"error": f"the body is not an .npz of the inputs: {short_error(e)}"}, status_code=400
                )
            want = request.query_params.get("boundaries", "0").lower() in ("1", "true", "yes")
            try:
                r = await self.infer(feeds, boundaries=want)
            except ValueError as e:
                return JSONResponse({"error": str(e)}, status_code=400)
            except Exception as e:
                return JSONResponse({"error": short_error(e)}, status_code=503)
            del feeds
            tensors = dict(r.get("boundaries") or {})
            tensors.update(r["outputs"])
            return Response(
                write_npz(tensors),
                media_type="application/octet-stream",
                headers={"x-cleave-parts": json.dumps(public_parts(r["parts"]))},
            )
        finally:
            if parse is not None and not parse.done():
                # Given up (the client went): the thread still holds what it unpacked.
                parse.add_done_callback(lambda f: (f.cancelled() or f.exception(), lease.close()))
            else:
                lease.close()

    def _parse_pool(self):
        if self.parse_pool is None:
            self.parse_pool = ThreadPoolExecutor(PARSE_THREADS, thread_name_prefix="cleave-npz")
        return self.parse_pool

    async def _read_body(self, request, limit, why, lease):
        """The request's body, refused (Refused) past `limit` bytes, when its client already
        has MAX_UPLOADS_PER_CLIENT bodies arriving, when the in-flight budget cannot hold it,
        or when it does not arrive within BODY_TIMEOUT_S plus a second per BODY_MIN_RATE
        bytes received; held bytes are taken from `lease`."""
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise Refused(f"the body passes {limit} bytes ({why})")
        client = request.client.host if request.client is not None else "?"
        arriving = self.uploads.get(client, 0)
        if arriving >= MAX_UPLOADS_PER_CLIENT:
            raise Refused(
                f"{client} has {arriving} requests whose bodies are still arriving, the most one client may "
                "(CLEAVE_MAX_UPLOADS_PER_CLIENT)",
                429,
                retry_after=1,
            )
        self.uploads[client] = arriving + 1
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        start = loop.time()
        state = {"size": 0, "late": False, "timer": None}

        def check():
            # One timer for the whole body, moved on as bytes arrive (cheaper than a timeout
            # on every chunk): past the deadline, the wait for the next chunk is cancelled.
            due = start + BODY_TIMEOUT_S + state["size"] / BODY_MIN_RATE
            if loop.time() >= due:
                state["late"] = True
                task.cancel()
            else:
                state["timer"] = loop.call_at(due, check)

        state["timer"] = loop.call_at(start + BODY_TIMEOUT_S, check)
        chunks = []
        try:
            while True:
                try:
                    message = await request.receive()
                except asyncio.CancelledError:
                    if not state["late"]:
                        raise
                    if hasattr(task, "uncancel"):
                        task.uncancel()
                    raise Refused(
                        f"the body did not arrive in time: {state['size']} bytes in {loop.time() - start:.0f}s "
                        f"(a body has CLEAVE_BODY_TIMEOUT_S={BODY_TIMEOUT_S:g}s, and a second more for every "
                        f"CLEAVE_BODY_MIN_RATE={BODY_MIN_RATE} bytes of it)",
                        408,
                    ) from None
                kind = message.get("type")
                if kind == "http.disconnect":
                    raise _Gone()
                if kind != "http.request":
                    continue
                chunk = message.get("body", b"")
                if chunk:
                    if state["size"] + len(chunk) > limit:
                        raise Refused(f"the body passes {limit} bytes ({why})")
                    lease.take(len(chunk))
                    state["size"] += len(chunk)
                    chunks.append(chunk)
                if not message.get("more_body", False):
                    break
        finally:
            state["timer"].cancel()
            left = self.uploads[client] - 1
            if left:
                self.uploads[client] = left
            else:
                del self.uploads[client]
        if len(chunks) == 1 and isinstance(chunks[0], bytes):
            return chunks[0]
        # One copy, while the chunks are still held: both count.
        size = state["size"]
        lease.take(size)
        body = b"".join(chunks)
        chunks.clear()
        lease.give(size)
        return body


DATA_PLANES = ("compiled", "handles")
# The compiled graph's hops cost well under a handle call's (docs/figures.md, "What a hop between parts costs"); its
# waiting threads spin, at SCHED_IDLE (compiled.WAIT_AS_IDLE).
DEFAULT_DATA_PLANE = "compiled"
# The ingress answers HTTP itself too, on any free port: Serve's proxy hop is most of what a
# request costs outside the model (docs/figures.md, "Serve's proxy against the fast route").
DEFAULT_INGRESS_PORT = 0


def build_app(
    conn_path,
    resources=None,
    *,
    name=None,
    request_timeout_s=DEFAULT_REQUEST_TIMEOUT_S,
    replicas=None,
    threads=None,
    data_plane=DEFAULT_DATA_PLANE,
    compiled_failed=None,
    ingress_port=DEFAULT_INGRESS_PORT,
    ingress_host="127.0.0.1",
    **decoder,
):
    """The Ray Serve application for the partition at `conn_path`.

    `resources` maps backend names to ray_actor_options fragments (see the module docstring);
    `request_timeout_s` bounds a whole request inside the ingress; `replicas` and `threads`
    map backend names (``"*"`` for the rest) to each part's replica count (default 1) and its
    engine's intra-op threads (default: the ``num_cpus`` its options reserve, else its share
    of its node's cores, the cores divided by the deployment's part replicas), as
    ``{"cpu": 2}``, or a string ``"cpu=2,npu=1"`` as the command line takes them.
    `data_plane` is ``"compiled"`` (the parts as actors joined by a Ray Compiled Graph that
    the ingress drives; the default; where it cannot serve the partition, the handles, and
    ``describe`` says why) or ``"handles"`` (one Serve deployment per part, called by handle).
    `compiled_failed`: why the compiled plane asked for could not be built (said in
    ``describe``); the handles serve it instead, under the settings asked for (so a later
    deploy of them finds it running).
    `ingress_port`: where the ingress also answers the route itself, on `ingress_host` of its
    node, skipping Serve's HTTP proxy (0: any free port, new each time the ingress starts;
    ``describe()["ingress"]["http"]`` says which; None: Serve's route only).
    """
    if data_plane not in DATA_PLANES:
        raise ValueError(f"data_plane {data_plane!r}: give one of {', '.join(DATA_PLANES)}")
    if is_decoder(Partition(conn_path)):
        # Stateful stages and a generation loop, not a request of tensors (decoder_app);
        # `decoder` holds its bounds (max_sequences, max_context, max_kv_bytes).
        if isinstance(threads, str):
            threads = parse_per_backend(threads, "threads")
        return build_decoder_app(
            conn_path,
            resources,
            name=name,
            threads=threads,
            ingress_port=ingress_port,
            ingress_host=ingress_host,
            **decoder,
        )
    if decoder:
        raise ValueError(f"{', '.join(decoder)}: only for a decoder's partition; {conn_path} has no state pairs")
    from ray import cloudpickle, serve

    package = sys.modules.get(__package__ or "")
    if package is not None:
        # Ship the package's classes and functions by value, so that replicas on other
        # nodes need neither this package nor the application folder.
        cloudpickle.register_pickle_by_value(package)
    if isinstance(replicas, str):
        replicas = parse_per_backend(replicas, "replicas")
    if isinstance(threads, str):
        threads = parse_per_backend(threads, "threads")
    partition = Partition(conn_path)
    opts = actor_options(partition, resources, replicas)
    specs = part_specs(partition, opts, threads, replicas)
    models = []
    for p in partition.parts:
        model_bytes = None
        if os.path.getsize(p["file"]) <= INLINE_MAX_BYTES:
            with open(p["file"], "rb") as f:
                model_bytes = f.read()
        models.append(model_bytes)
    plane = {"kind": data_plane}
    asked = data_plane
    if compiled_failed is not None:
        asked, data_plane = "compiled", "handles"
        plane = {"kind": "handles", "why": compiled_failed}
    elif data_plane == "compiled":
        why = compiled_plane_refusal(partition, replicas)
        if why:
            plane = {"kind": "handles", "why": f"the compiled data plane cannot serve it: {why}"}
    else:
        plane["why"] = (
            "asked for (--data-plane handles; the default, compiled, joins the parts by a Ray Compiled Graph)"
        )
    handles = []
    if plane["kind"] == "compiled":
        lanes = per_backend_value(replicas, partition.parts[0]["backend"], 1)
        plane.update(
            lanes=lanes,
            inflight=max(4, 2 * len(partition.parts)),
            workers=[
                (spec, model_bytes, opts[p["deployment"]])
                for p, spec, model_bytes in zip(partition.parts, specs, models)
            ],
        )
    else:
        for p, spec, model_bytes in zip(partition.parts, specs, models):
            dep = serve.deployment(
                PartReplica,
                name=p["deployment"],
                num_replicas=per_backend_value(replicas, p["backend"], 1),
                ray_actor_options=opts[p["deployment"]],
                max_ongoing_requests=PART_MAX_ONGOING,
                # A part that cannot load will not load on a retry either; fail the deploy soon.
                max_constructor_retry_count=3,
                health_check_period_s=2,
                health_check_timeout_s=10,
            )
            handles.append(dep.bind(spec, model_bytes, opts[p["deployment"]]))
    listen = None if ingress_port is None else {"host": ingress_host, "port": int(ingress_port)}
    meta = ingress_meta(
        partition,
        specs,
        name or partition.stem,
        partition.digest(settings(resources, replicas, threads, asked, listen)),
    )
    meta["listen"] = listen
    ingress = serve.deployment(
        Ingress,
        name="ingress",
        num_replicas=1,
        ray_actor_options=opts["ingress"],
        max_ongoing_requests=INGRESS_MAX_ONGOING,
        health_check_period_s=2,
        health_check_timeout_s=10,
    )
    return ingress.bind(meta, request_timeout_s, plane, *handles)
