"""A decoder LLM served as stages on Ray: one actor per stage (``StageWorker``) that keeps the
KV caches of the sequences it holds, and an ingress (``DecoderIngress``, a Serve deployment)
that runs the generation loop (``generation``), answers OpenAI's ``/v1/completions`` with
streaming (``completions``), and streams tokens to Python through its handle's ``generate``.

Only the hidden state and the small per-step inputs go from the ingress to a stage and from
stage to stage; the caches never move. A stage actor that dies is restarted by Ray (on its own
node, or on another with its backend's resource), and each generation that was using it
replays its tokens into the new one, then goes on: the client sees a pause."""

import asyncio
import os
import sys
import time
import uuid

# At the top, never inside a function: Ray ships this package to other nodes by value.
from .actors import actor_options, node_threads
from .completions import Completions, handle
from .generation import Decoder, Generation, StageLost, StageTimeout
from .listener import Listener
from .partition import INLINE_MAX_BYTES, Partition
from .runtime import extension

# How long one stage step may wait for its actor (a restart included) before it counts as lost.
STEP_TIMEOUT_S = 60.0
DEFAULT_MAX_SEQUENCES = 64
# A sequence idle this long (its client gone without the ingress knowing) gives its place in
# a stage to a new one.
DEFAULT_MAX_IDLE_S = 600.0
ACTOR_NAMESPACE = "cleave"


def is_decoder(partition):
    """Whether the partition's source has state pairs (a decoder's KV cache)."""
    return bool((partition.raw.get("source") or {}).get("state"))


class StageWorker:
    """One stage and its sequences' caches, as a Ray actor (one step at a time)."""

    def __init__(self, spec, model_bytes, threads, limits):
        ext = extension()
        if model_bytes is not None:
            model = ext.load_bytes(model_bytes, spec["file"])
        else:
            model = ext.load_path(spec["path"])
        threads = int(threads or 0) or node_threads(1)
        self.stage = ext.open_stage(model, spec["backend"], spec["engine"], threads, spec["state"], **limits)
        self.pid = os.getpid()
        self.started = time.time()

    def step(self, sequence, fed, feeds, past=None):
        return self.stage.step(sequence, fed, feeds, past)

    def end(self, sequence):
        return self.stage.end(sequence)

    def stats(self):
        import ray

        node = ray.get_runtime_context().get_node_id()
        st = self.stage.stats()
        # Steps a second since this actor started (a restart starts it afresh): each decode
        # step is one token of one sequence.
        st["steps_per_s"] = round(st["steps"] / max(1e-9, time.time() - self.started), 3)
        return dict(st, engine=self.stage.engine, note=self.stage.note, pid=self.pid, node=node)


class RayStage:
    """A stage actor as the generation loop calls it: a dead or unreachable actor is
    :class:`StageLost`; a limit or an engine failure is the stage's own error."""

    def __init__(self, actor, index, timeout_s=STEP_TIMEOUT_S):
        self.actor, self.index, self.timeout_s = actor, index, timeout_s

    async def _call(self, method, *args):
        import ray

        lost = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)
        try:
            return await asyncio.wait_for(getattr(self.actor, method).remote(*args), self.timeout_s)
        except lost as e:
            raise StageLost(f"stage {self.index + 1}: {type(e).__name__}") from None
        except asyncio.TimeoutError:
            raise StageTimeout(
                f"stage {self.index + 1} did not answer within {self.timeout_s:g} s (busy with other sequences)"
            ) from None

    async def step(self, sequence, fed, feeds, past=None):
        return await self._call("step", sequence, fed, feeds, past)

    async def end(self, sequence):
        return await self._call("end", sequence)

    async def stats(self, timeout_s=5.0):
        try:
            return await asyncio.wait_for(self.actor.stats.remote(), timeout_s)
        except asyncio.TimeoutError:
            raise StageLost(
                f"stage {self.index + 1}: no answer within {timeout_s:g} s (not placed yet: no node has the "
                "resources or memory it asks for; or restarting)"
            ) from None
        except Exception as e:
            raise StageLost(f"stage {self.index + 1}: {type(e).__name__}") from None


class DecoderIngress:
    """The route and the handle's methods over a decoder's stage actors."""

    def __init__(self, meta, workers):
        import ray

        self.meta = meta
        self.decoder = Decoder(meta["conn"], meta["path"])
        # Named, so that an operator (or a test) can find a stage's actor: ray.get_actor(name,
        # namespace=ACTOR_NAMESPACE), names in describe().
        run = uuid.uuid4().hex[:8]
        # Held here for as long as the stages live: Ray restarts a dead stage from its
        # constructor's arguments, which must still be in the object store then.
        self.model_refs = [None if b is None else ray.put(b) for _, b, _, _ in workers]
        self.names = [f"{meta['name']}.stage{i + 1}.{run}" for i in range(len(workers))]
        self.actors = [
            ray.remote(StageWorker)
            .options(name=n, namespace=ACTOR_NAMESPACE, max_restarts=-1, max_task_retries=0, max_concurrency=1, **opts)
            .remote(spec, ref, threads, meta["limits"])
            for n, ref, (spec, _, threads, opts) in zip(self.names, self.model_refs, workers)
        ]
        stages = [RayStage(a, i, meta["step_timeout_s"]) for i, a in enumerate(self.actors)]
        codec = extension().Codec(meta["tokenizer"]) if meta.get("tokenizer") else None
        self.completions = Completions(self.decoder, stages, meta["name"], codec, meta["limits"]["max_context"])
        listen = meta.get("listen")
        self.listener = Listener(listen["host"], listen["port"], self.__call__) if listen else None
        self.started = time.monotonic()
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop yet: the first call starts the listener
        if self.listener is not None:
            self.listener.start()

    async def __call__(self, request):
        if self.listener is not None:
            self.listener.start()
        return await handle(self.completions, request)

    async def generate(self, prompt, max_tokens=16, stop=(), temperature=0.0, top_k=0, top_p=1.0, seed=0):
        """Streams the tokens of one completion (``handle.options(stream=True).generate.remote(...)``)."""
        if self.listener is not None:
            self.listener.start()
        if isinstance(prompt, str):
            if self.completions.codec is None:
                raise ValueError("the prompt is text but no tokenizer.json sits beside the model: give token ids")
            prompt = self.completions.codec.encode(prompt)
        sampler = extension().Sampler(float(temperature), int(top_k), float(top_p), int(seed))
        gen = Generation(self.decoder, self.completions.stages, list(prompt), int(max_tokens), list(stop), sampler)
        self.completions.active += 1
        tokens = gen.__aiter__()
        try:
            async for token in tokens:
                self.completions.tokens += 1
                yield token
        finally:
            await tokens.aclose()
            self.completions.active -= 1
            self.completions.served += 1

    async def describe(self):
        """Per stage: its engine, node, actor name, sequences held, tokens and KV bytes held,
        steps and steps a second (a token each in decode); the ingress's completions served and
        tokens a second; the listener's address."""
        elapsed = max(1e-9, time.monotonic() - self.started)
        stages = []
        for i, s in enumerate(self.completions.stages):
            try:
                st = await s.stats()
            except StageLost as e:
                st = {"error": str(e)}
            st["stage"] = i + 1
            st["actor"] = self.names[i]
            st["backend"] = self.decoder.stages[i]["backend"]
            stages.append(st)
        out = {
            "name": self.meta["name"],
            "kind": "decoder",
            "stages": stages,
            "active": self.completions.active,
            "served": self.completions.served,
            "tokens_per_s": self.completions.tokens / elapsed,
        }
        if self.listener is not None:
            self.listener.start()
            out["http"] = {"address": self.listener.address(), "error": self.listener.error}
        return out


def build_decoder_app(
    conn_path,
    resources=None,
    *,
    name=None,
    threads=None,
    max_sequences=DEFAULT_MAX_SEQUENCES,
    max_context=0,
    max_kv_bytes=0,
    max_idle_s=DEFAULT_MAX_IDLE_S,
    ingress_port=0,
    ingress_host="127.0.0.1",
    step_timeout_s=STEP_TIMEOUT_S,
):
    """The Ray Serve application of the decoder partition at `conn_path`: its stages as actors
    placed by their backends (``resources`` as ``build_app``'s), each holding at most
    `max_sequences` sequences of `max_context` tokens (0: unbounded) and `max_kv_bytes` of cache."""
    from ray import cloudpickle, serve

    package = sys.modules.get(__package__ or "")
    if package is not None:
        cloudpickle.register_pickle_by_value(package)
    partition = Partition(conn_path)
    if not is_decoder(partition):
        raise ValueError(f"{partition.path}: the model has no state pairs, so it is not served as a decoder")
    decoder = Decoder(partition.raw, partition.path)
    opts = actor_options(partition, resources)
    workers = []
    for p, spec, raw in zip(partition.parts, decoder.stages, partition.raw["parts"]):
        spec = dict(spec, path=p["file"])
        model_bytes = None
        if os.path.getsize(p["file"]) <= INLINE_MAX_BYTES:
            with open(p["file"], "rb") as f:
                model_bytes = f.read()
        n = (threads or {}).get(p["backend"], (threads or {}).get("*", 0)) if isinstance(threads, dict) else 0
        stage_opts = dict(opts[p["deployment"]])
        # Ray places a stage where its weights fit: nodes declare their memory resource.
        if raw.get("weights_bytes") and "memory" not in stage_opts:
            stage_opts["memory"] = int(raw["weights_bytes"])
        workers.append((spec, model_bytes, n, stage_opts))
    tokenizer = extension().Codec.beside(partition.path)
    meta = {
        "name": name or partition.stem,
        "path": partition.path,
        "conn": partition.raw,
        "tokenizer": str(tokenizer) if tokenizer else None,
        "limits": {
            "max_sequences": int(max_sequences),
            "max_context": int(max_context),
            "max_bytes": int(max_kv_bytes),
            "max_idle_s": float(max_idle_s),
        },
        "listen": None if ingress_port is None else {"host": ingress_host, "port": int(ingress_port)},
        "step_timeout_s": float(step_timeout_s),
    }
    ingress = serve.deployment(
        DecoderIngress,
        name="ingress",
        num_replicas=1,
        ray_actor_options=opts["ingress"],
        max_ongoing_requests=256,
        health_check_period_s=2,
        health_check_timeout_s=10,
    )
    return ingress.bind(meta, workers)
