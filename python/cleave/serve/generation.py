"""Generation on the server: the loop that runs a decoder's stages for one sequence (the prompt
in one step, then one token a step), each stage keeping that sequence's KV cache where it runs,
so that only the hidden state and the small per-step inputs cross a hop.

The stages are anything with ``async step(sequence, fed, feeds) -> {name: array}`` and ``async
end(sequence)``: in-process :class:`LocalStage`\\ s, or Ray actors (``stage_actors``). A stage
that is lost mid-generation (its actor or node died: :class:`StageLost`) is brought back by its
transport, and the sequence's caches are rebuilt by replaying its tokens in one step; the
tokens that follow are those the generation would have made anyway."""

import asyncio
import itertools
import os
import time

import numpy as np

# At the top, never inside a function: Ray ships this package to other nodes by value.
from .runtime import extension

SMALL_INPUTS = ("input_ids", "attention_mask", "position_ids")
# How long a generation waits for a lost stage to come back (its actor restarted, its node
# back or another found) before the failure is the client's; it asks again after a pause
# that doubles up to RETRY_MAX_S.
RECOVER_S = 120.0
RETRY_FIRST_S = 0.1
RETRY_MAX_S = 2.0


class StageLost(Exception):
    """A stage's process went away; its transport brings it back on the next call."""


class StageTimeout(Exception):
    """A stage did not answer in time: busy, not gone (a replay would only add to its work)."""


# A stage's refusal of a step that assumes another past than it holds (its cache was lost
# or a step went missing): the sequence is replayed, as for a lost stage.
MISMATCH = 409


class Decoder:
    """What the loop needs from a partition's connection file (as ``json.load`` gives it):
    each stage's inputs and outputs besides its state, and the output that holds the logits."""

    def __init__(self, conn, path="<conn.json>"):
        source = conn.get("source") or {}
        state = source.get("state") or {}
        if not state:
            raise ValueError(f"{path}: the model has no state pairs (a decoder's KV cache), so it is not served as one")
        self.path = path
        self.inputs = [n for n in source.get("inputs", []) if n not in state]
        for name in self.inputs:
            if name not in SMALL_INPUTS:
                raise ValueError(
                    f"{path}: input '{name}' is neither {', '.join(SMALL_INPUTS)} nor a state's input, "
                    "so a server cannot feed it"
                )
        if "input_ids" not in self.inputs:
            raise ValueError(f"{path}: the model has no input 'input_ids'")
        outputs = [o for o in source.get("outputs", []) if o not in set(state.values())]
        if not outputs:
            raise ValueError(f"{path}: the model has no output besides its state, so no logits")
        self.logits = "logits" if "logits" in outputs else outputs[0]
        self.stages = []
        for p in conn.get("parts") or []:
            own = p.get("state") or {}
            self.stages.append(
                {
                    "file": p["file"],
                    "backend": p.get("backend") or "cpu",
                    "engine": p.get("engine"),
                    "inputs": [n for n in p["inputs"] if n not in own],
                    "state": sorted(own.items()),
                }
            )

    def feeds(self, tokens, past):
        """The small inputs of a step feeding `tokens` after `past` tokens of context, as int64 (a
        stage narrows them for a part that declares int32)."""
        n = len(tokens)
        made = {
            "input_ids": np.asarray([tokens], dtype=np.int64),
            "attention_mask": np.ones((1, past + n), dtype=np.int64),
            "position_ids": np.arange(past, past + n, dtype=np.int64)[None, :],
        }
        return {k: made[k] for k in self.inputs}


class LocalStage:
    """A stage in this process (`cleave._cleave.Stage`), its steps run off the event loop."""

    def __init__(self, path, backend="cpu", engine=None, threads=0, state=None, **limits):
        ext = extension()
        self.stage = ext.open_stage(ext.load_path(str(path)), backend, engine, threads, state, **limits)

    @classmethod
    def of(cls, folder, spec, threads=0, engine=None, **limits):
        """The stage of `spec` (one of ``Decoder.stages``), its file in `folder`."""
        return cls(
            os.path.join(folder, spec["file"]),
            spec["backend"],
            engine or spec["engine"],
            threads,
            spec["state"],
            **limits,
        )

    async def step(self, sequence, fed, feeds, past=None):
        return await asyncio.to_thread(self.stage.step, sequence, fed, feeds, past)

    async def end(self, sequence):
        return self.stage.end(sequence)

    async def stats(self):
        return dict(self.stage.stats(), engine=self.stage.engine)


class Generation:
    """One sequence's tokens: ``async for token in Generation(...)``. Its caches are freed on
    every stage when it ends, fails or is closed (a client that went away)."""

    _ids = itertools.count()

    def __init__(
        self, decoder, stages, prompt, max_tokens=16, stop=(), sampler=None, sequence=None, recover_s=RECOVER_S
    ):
        if not prompt:
            raise ValueError("the prompt has no token")
        if max_tokens < 1:
            raise ValueError(f"max_tokens {max_tokens}: give 1 or more")
        self.decoder, self.stages = decoder, list(stages)
        if len(self.stages) != len(decoder.stages):
            raise ValueError(f"{len(self.stages)} stages for a partition of {len(decoder.stages)}")
        self.sequence = sequence or f"seq-{os.getpid()}-{next(self._ids)}"
        self.sampler = sampler or extension().Sampler()
        self.max_tokens, self.stop = max_tokens, set(stop)
        # Tokens the stages hold in their caches, and those the next step feeds.
        self.held, self.pending = [], list(prompt)
        self.produced = []
        self.finish_reason = None
        self.replays = 0
        self.recover_s = recover_s
        # Per step: (tokens fed, seconds, bytes that crossed a hop).
        self.steps = []

    def __aiter__(self):
        return self._run()

    async def _run(self):
        try:
            while self.finish_reason is None:
                token = await self._next()
                self.produced.append(token)
                if token in self.stop:
                    self.finish_reason = "stop"
                elif len(self.produced) >= self.max_tokens:
                    self.finish_reason = "length"
                yield token
        finally:
            await self.close()

    async def close(self):
        """Frees the sequence's caches on every stage (a lost stage holds none). The ends are
        sent together and finish even where this task is being cancelled (a client gone)."""
        ends = [asyncio.ensure_future(s.end(self.sequence)) for s in self.stages]
        try:
            await asyncio.shield(asyncio.gather(*ends, return_exceptions=True))
        except asyncio.CancelledError:
            pass

    async def _next(self):
        lost_at, pause = None, RETRY_FIRST_S
        while True:
            try:
                logits = await self._forward(self.pending, len(self.held))
                break
            except Exception as e:
                if not lost(e):
                    raise
                now = time.monotonic()
                lost_at = lost_at or now
                if now - lost_at > self.recover_s:
                    raise
                await asyncio.sleep(pause)
                pause = min(2 * pause, RETRY_MAX_S)
                self.replays += 1
                # Every stage starts the sequence afresh: all its tokens in one step.
                await self.close()
                self.pending = self.held + self.pending
                self.held = []
        token = int(self.sampler.choose(logits))
        self.held += self.pending
        self.pending = [token]
        return token

    async def _forward(self, tokens, past):
        began = time.perf_counter()
        env = self.decoder.feeds(tokens, past)
        small = set(env)
        hop = 0
        for spec, stage in zip(self.decoder.stages, self.stages):
            feeds = {n: env[n] for n in spec["inputs"]}
            hop += sum(a.nbytes for n, a in feeds.items() if n not in small)
            env.update(await stage.step(self.sequence, len(tokens), feeds, past))
        self.steps.append((len(tokens), time.perf_counter() - began, hop))
        return env[self.decoder.logits]


def lost(e):
    """Whether a step's failure is a stage lost (or one that lost the sequence's cache), which
    a replay mends."""
    for _ in range(8):
        if isinstance(e, StageLost) or getattr(e, "status", None) == MISMATCH:
            return True
        inner = getattr(e, "cause", None)
        if not isinstance(inner, BaseException):
            return False
        e = inner
    return False
