"""A decoder's stages served with their KV caches kept per sequence (cleave.serve.generation,
completions), here in process and over HTTP on 127.0.0.1, without Ray (the two-node cluster
test, crates/cli/tests/ray.rs, serves them on Ray). Tokens are compared with the in-process
runner (Runner.generate) and with the whole model decoded by onnxruntime without a cache
(scripts/oracles/check_generate.py)."""

import asyncio
import json
import pathlib
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest

import cleave
from cleave.serve.completions import Completions, serve_local
from cleave.serve.generation import Decoder, Generation, LocalStage, StageLost

ROOT = pathlib.Path(__file__).resolve().parents[2]
# tiny_llama: hidden 32 float32, so 128 bytes a token between two stages.
HIDDEN_BYTES = 32 * 4


@pytest.fixture(scope="module")
def decoders(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("decoders")
    subprocess.run([sys.executable, str(ROOT / "scripts/testdata/make_decoder_models.py"), str(out)], check=True)
    return out


def cut(decoders: pathlib.Path, stages: int) -> pathlib.Path:
    out = decoders / f"s{stages}"
    if not out.exists():
        cleave.load(decoders / "tiny_llama.onnx").partition(stages=stages).save(out)
    return out / "tiny_llama.conn.json"


def open_stages(conn: pathlib.Path, **limits: int) -> tuple:
    decoder = Decoder(json.loads(conn.read_text()), str(conn))
    return decoder, [LocalStage.of(str(conn.parent), s, engine="ort", **limits) for s in decoder.stages]


async def tokens_of(gen: Generation) -> list:
    return [t async for t in gen]


def oracle(model: pathlib.Path, prompt: str, n: int) -> list:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts/oracles/check_generate.py"), str(model),
         "--prompt-ids", prompt, "--max-new-tokens", str(n)],
        check=True, capture_output=True, text=True)
    return list(json.loads(done.stdout)["tokens"])


@pytest.mark.parametrize("stages", [1, 2, 4])
def test_stages_keep_their_caches_and_pass_only_the_hidden_state(decoders: pathlib.Path, stages: int) -> None:
    conn = cut(decoders, stages)
    want = oracle(decoders / "tiny_llama.onnx", "1,2,3", 12)
    runner = cleave.load(decoders / "tiny_llama.onnx").partition(stages=stages).runner(
        {f"stage{i + 1}": "ort" for i in range(stages)})
    assert list(runner.generate([1, 2, 3], 12)) == want
    decoder, held = open_stages(conn)
    gen = Generation(decoder, held, [1, 2, 3], 12)
    assert asyncio.run(tokens_of(gen)) == want
    assert gen.finish_reason == "length"
    # Prefill carries 3 tokens' hidden state a hop, each decode step one token's, whatever the
    # context: no K or V crosses.
    hops = stages - 1
    assert gen.steps[0][2] == 3 * HIDDEN_BYTES * hops
    assert {s[2] for s in gen.steps[1:]} == {HIDDEN_BYTES * hops}
    # Ended: no stage holds the sequence.
    assert all(s.stage.stats()["sequences"] == 0 for s in held)


def test_sequences_interleave_and_a_stop_token_ends_one(decoders: pathlib.Path) -> None:
    conn = cut(decoders, 2)
    decoder, held = open_stages(conn)
    want = oracle(decoders / "tiny_llama.onnx", "1,2,3", 10)
    other = oracle(decoders / "tiny_llama.onnx", "7,8", 10)

    async def both() -> list:
        return await asyncio.gather(
            tokens_of(Generation(decoder, held, [1, 2, 3], 10)),
            tokens_of(Generation(decoder, held, [7, 8], 10)),
            tokens_of(Generation(decoder, held, [1, 2, 3], 10, stop=[want[2]])),
        )

    a, b, c = asyncio.run(both())
    assert a == want and b == other and c == want[:3]
    assert held[0].stage.stats()["steps"] == 10 + 10 + 3


class Flaky:
    """A stage whose process "dies" once at step `at`: its caches are gone and the call fails
    as a transport says so; or, `silent`, the caches are gone without a word."""

    def __init__(self, stage: LocalStage, at: int, silent: bool = False) -> None:
        self.inner, self.at, self.calls, self.silent = stage, at, 0, silent

    async def step(self, sequence: str, fed: int, feeds: dict, past: object = None) -> dict:
        self.calls += 1
        if self.calls == self.at:
            self.inner.stage.end(sequence)
            if not self.silent:
                raise StageLost("stage 2: died")
        return await self.inner.step(sequence, fed, feeds, past)

    async def end(self, sequence: str) -> bool:
        return await self.inner.end(sequence)


def test_a_lost_stage_is_replayed_and_the_tokens_do_not_change(decoders: pathlib.Path) -> None:
    conn = cut(decoders, 2)
    decoder, held = open_stages(conn)
    want = oracle(decoders / "tiny_llama.onnx", "1,2,3", 12)
    flaky = Flaky(held[1], at=6)
    gen = Generation(decoder, [held[0], flaky], [1, 2, 3], 12)
    assert asyncio.run(tokens_of(gen)) == want
    assert gen.replays == 1
    # The replay fed the prompt and the 5 tokens made before the loss in one step.
    assert any(fed == 3 + 5 for fed, _, _ in gen.steps)
    # A stage that lost the cache without a word refuses the next step (409): replayed too.
    gen = Generation(decoder, [held[0], Flaky(held[1], at=4, silent=True)], [1, 2, 3], 12)
    assert asyncio.run(tokens_of(gen)) == want and gen.replays == 1
    # A stage that never comes back fails the generation once its time is out.
    dead = type("Dead", (), {"step": lambda self, *a: _raise(), "end": lambda self, s: _false()})()
    gen = Generation(decoder, [held[0], dead], [1, 2, 3], 4, recover_s=0.3)
    with pytest.raises(StageLost):
        asyncio.run(tokens_of(gen))
    assert held[0].stage.stats()["sequences"] == 0


async def _raise() -> dict:
    raise StageLost("stage 2: gone")


async def _false() -> bool:
    return False


def test_a_stage_refuses_past_its_bounds_with_the_status(decoders: pathlib.Path) -> None:
    conn = cut(decoders, 2)
    decoder, held = open_stages(conn, max_sequences=1, max_context=8)
    stage = held[0].stage
    feeds = decoder.feeds([1, 2, 3], 0)
    stage.step("a", 3, {k: feeds[k] for k in decoder.stages[0]["inputs"]})
    with pytest.raises(cleave.LimitError) as busy:
        stage.step("b", 3, {k: feeds[k] for k in decoder.stages[0]["inputs"]})
    assert busy.value.status == 429 and "holds 1 sequences" in str(busy.value)
    long = decoder.feeds(list(range(6)), 3)
    with pytest.raises(cleave.LimitError) as too_long:
        stage.step("a", 6, {k: long[k] for k in decoder.stages[0]["inputs"]})
    assert too_long.value.status == 413 and "9 tokens" in str(too_long.value)
    assert stage.context("a") == 3
    assert stage.end("a") and not stage.end("a")
    with pytest.raises(cleave.ArgumentError, match="temperature"):
        cleave._cleave.Sampler(temperature=-1.0)


def post(url: str, body: dict, timeout: float = 60) -> tuple:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers.get("Content-Type"), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read().decode()


def events(text: str) -> list:
    lines = [ln[6:] for ln in text.split("\n\n") if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]", lines[-3:]
    return [json.loads(x) for x in lines[:-1]]


class Server:
    """The route on uvicorn at 127.0.0.1, its loop in a thread of its own."""

    def __init__(self, completions: Completions) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.server, port = asyncio.run_coroutine_threadsafe(serve_local(completions), self.loop).result(30)
        self.url = f"http://127.0.0.1:{port}"

    def close(self) -> None:
        self.server.should_exit = True


def test_v1_completions_streams_tokens_as_openai_clients_read_them(decoders: pathlib.Path) -> None:
    conn = cut(decoders, 2)
    decoder, held = open_stages(conn, max_sequences=2)
    codec = cleave._cleave.Codec(str(decoders / "tokenizer.json"))
    server = Server(Completions(decoder, held, "tiny_llama", codec, max_context=64))
    want = oracle(decoders / "tiny_llama.onnx", "1,2,3", 10)
    url = server.url + "/v1/completions"
    try:
        status, kind, text = post(url, {"prompt": [1, 2, 3], "max_tokens": 10, "stream": True})
        assert status == 200 and kind.startswith("text/event-stream"), text
        chunks = events(text)
        assert [c["choices"][0]["token_ids"][0] for c in chunks] == want
        assert all(c["object"] == "text_completion" and c["model"] == "tiny_llama" for c in chunks)
        assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 9 + ["length"]
        assert "".join(c["choices"][0]["text"] for c in chunks) == codec.decode(want)
        # Whole, with usage; a text prompt through the tokenizer beside the model.
        status, _, text = post(url, {"prompt": "w1 w2 w3", "max_tokens": 10})
        body = json.loads(text)
        assert status == 200 and body["choices"][0]["token_ids"] == want, text
        assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 10, "total_tokens": 13}
        # A stop token ends it at its first coming (want[2] is the first of its value).
        assert want[2] not in want[:2]
        status, _, text = post(url, {"prompt": [1, 2, 3], "max_tokens": 10, "stop_token_ids": [want[2]]})
        choice = json.loads(text)["choices"][0]
        assert choice["finish_reason"] == "stop" and choice["token_ids"] == want[:3], text
        # Refusals: OpenAI's error object and the status a client acts on.
        for body, code, said in [
            ({"prompt": [], "max_tokens": 4}, 400, "'prompt' must be"),
            ({"prompt": [1], "max_tokens": 0}, 400, "'max_tokens' 0"),
            ({"prompt": [1], "temperature": -2}, 400, "temperature"),
            ({"prompt": [1], "stop": ["x"]}, 400, "stop_token_ids"),
            ({"prompt": [1, 2, 3], "max_tokens": 62}, 413, "64 tokens of context"),
            ({"prompt": [1], "top_p": 0}, 400, "top_p"),
        ]:
            status, _, text = post(url, body)
            assert status == code and said in json.loads(text)["error"]["message"], (body, text)
        # vLLM's "no top-k" (-1) is taken.
        status, _, text = post(url, {"prompt": [1, 2, 3], "max_tokens": 3, "top_k": -1})
        assert status == 200 and json.loads(text)["choices"][0]["token_ids"] == want[:3], text
        req = urllib.request.Request(url, b"{not json", {"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as bad:
            urllib.request.urlopen(req, timeout=10)
        assert bad.value.code == 400
        with urllib.request.urlopen(server.url + "/v1/models", timeout=10) as r:
            assert json.load(r)["data"][0]["id"] == "tiny_llama"
        # Two sequences held on each stage at most: a third at once is told to come back (429).
        first = {k: v for k, v in decoder.feeds([1], 0).items() if k in decoder.stages[0]["inputs"]}
        held[0].stage.step("held-1", 1, first)
        held[0].stage.step("held-2", 1, first)
        status, _, text = post(url, {"prompt": [1, 2, 3], "max_tokens": 4, "stream": True})
        assert status == 429 and json.loads(text)["error"]["code"] == "rate_limit_exceeded", text
        held[0].stage.end("held-1")
        held[0].stage.end("held-2")
    finally:
        server.close()


class Slow:
    """A stage that takes 50 ms a step, so that a stream lasts long enough to be left."""

    def __init__(self, stage: LocalStage) -> None:
        self.inner = stage

    async def step(self, sequence: str, fed: int, feeds: dict, past: object = None) -> dict:
        await asyncio.sleep(0.05)
        return await self.inner.step(sequence, fed, feeds, past)

    async def end(self, sequence: str) -> bool:
        return await self.inner.end(sequence)


def test_a_client_gone_mid_stream_ends_its_sequence(decoders: pathlib.Path) -> None:
    decoder, held = open_stages(cut(decoders, 2))
    server = Server(Completions(decoder, [held[0], Slow(held[1])], "tiny_llama"))
    try:
        body = json.dumps({"prompt": [1, 2, 3], "max_tokens": 200, "stream": True}).encode()
        r = urllib.request.urlopen(urllib.request.Request(server.url + "/v1/completions", body), timeout=30)
        assert r.readline().startswith(b"data: ")
        r.close()
        for _ in range(100):
            if all(s.stage.stats()["sequences"] == 0 for s in held):
                break
            threading.Event().wait(0.05)
        steps = held[0].stage.stats()["steps"]
        assert all(s.stage.stats()["sequences"] == 0 for s in held), [s.stage.stats() for s in held]
        # Stopped, not run out: 200 tokens would take 10 s.
        threading.Event().wait(0.3)
        assert held[0].stage.stats()["steps"] == steps < 100
    finally:
        server.close()


def test_decoder_refuses_what_a_server_cannot_feed(decoders: pathlib.Path) -> None:
    conn = json.loads(cut(decoders, 2).read_text())
    bare = dict(conn, source=dict(conn["source"], state={}))
    with pytest.raises(ValueError, match="no state pairs"):
        Decoder(bare)
    odd = dict(conn, source=dict(conn["source"], inputs=[*conn["source"]["inputs"], "pixel_values"]))
    with pytest.raises(ValueError, match="input 'pixel_values' is neither"):
        Decoder(odd)
    assert np.array_equal(Decoder(conn).feeds([5, 6], 3)["position_ids"], [[3, 4]])


def test_the_command_line_refuses_decoder_flags_where_there_is_no_decoder(decoders: pathlib.Path) -> None:
    plain = ROOT / "examples/tiny_cnn.onnx"
    out = decoders / "cnn"
    cleave.load(plain).partition(rules=ROOT / "examples/tiny_cnn.part").save(out)
    serve = [sys.executable, "-m", "cleave.serve"]
    done = subprocess.run(
        [*serve, "serve", str(out / "tiny_cnn.conn.json"), "--address", "127.0.0.1:1", "--max-context", "64"],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--max-context: only for a decoder's partition" in done.stderr, done.stderr
    done = subprocess.run([*serve, "export", str(out / "tiny_cnn.conn.json"), str(decoders / "app0"), "--max-sequences",
                           "2"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--max-sequences: only for a decoder's partition" in done.stderr, done.stderr
    # An exported decoder keeps its bounds.
    done = subprocess.run([*serve, "export", str(cut(decoders, 2)), str(decoders / "app"), "--max-context", "64"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "DECODER = {'max_context': 64}" in (decoders / "app/app.py").read_text()
    # bench and verify send one request of tensors: a decoder is refused, saying what to do.
    done = subprocess.run([*serve, "bench", str(cut(decoders, 2)), "--address", "127.0.0.1:1"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "serve it (`cleave serve`)" in done.stderr, done.stderr


def test_a_refusal_wrapped_as_ray_wraps_it_keeps_its_status_and_words() -> None:
    from cleave.serve.completions import status_of

    class RayTaskError(Exception):
        """As Ray's: the stage's exception in `cause`."""

    wrapped = RayTaskError("ray: traceback ...\nLimitError: the stage holds 64 sequences")
    wrapped.cause = cleave.LimitError("the stage holds 64 sequences, its most", 429)  # type: ignore[attr-defined]
    status, body = status_of(wrapped)
    assert status == 429 and body["error"]["message"] == "the stage holds 64 sequences, its most"
    json.dumps(body)
    # Errors cross processes whole (Ray pickles a stage's error to the ingress).
    import pickle

    back = pickle.loads(pickle.dumps(wrapped.cause))  # type: ignore[attr-defined]
    assert isinstance(back, cleave.LimitError) and (back.status, back.cause) == (429, wrapped.cause.cause)  # type: ignore[attr-defined]
    back = pickle.loads(pickle.dumps(failed_engine := cleave.EngineError("boom", "p.onnx", "n1", "Add")))
    assert (back.cause, back.path, back.node, back.op, str(back)) == ("boom", "p.onnx", "n1", "Add", str(failed_engine))
    failed = RayTaskError("ray: traceback ...")
    failed.cause = cleave.EngineError("ORT failed on node Add_3", "part.onnx")  # type: ignore[attr-defined]
    status, body = status_of(failed)
    assert status == 500 and body["error"]["message"] == "EngineError: ORT failed on node Add_3", body


class Ending:
    """A stage whose end takes a while (a call to another process), recording who ended."""

    def __init__(self, stage: LocalStage, ended: list) -> None:
        self.inner, self.ended = stage, ended

    async def step(self, sequence: str, fed: int, feeds: dict, past: object = None) -> dict:
        return await self.inner.step(sequence, fed, feeds, past)

    async def end(self, sequence: str) -> bool:
        await asyncio.sleep(0.05)
        self.ended.append(self)
        return await self.inner.end(sequence)


def test_a_generation_cancelled_still_ends_its_sequence_on_every_stage(decoders: pathlib.Path) -> None:
    import anyio

    decoder, held = open_stages(cut(decoders, 2))
    ended: list = []
    stages = [Ending(s, ended) for s in held]

    async def go() -> None:
        tokens = Generation(decoder, stages, [1, 2, 3], 50).__aiter__()
        # As starlette stops a stream whose client left: an anyio scope cancelled, which
        # cancels every await made inside it from then on, the generation's closing included.
        with anyio.CancelScope() as scope:
            try:
                async for _ in tokens:
                    scope.cancel()
                    await anyio.sleep(0)
            finally:
                await tokens.aclose()
        await asyncio.sleep(0.3)

    asyncio.run(go())
    assert len(ended) == 2 and all(s.stage.stats()["sequences"] == 0 for s in held), ended


def test_a_finished_stream_has_freed_its_place_when_the_client_hears_the_end(decoders: pathlib.Path) -> None:
    decoder, held = open_stages(cut(decoders, 2), max_sequences=1)
    ended: list = []
    # Ends that take 50 ms: a next request sent on [DONE] must still find the place free.
    server = Server(Completions(decoder, [Ending(s, ended) for s in held], "tiny_llama"))
    try:
        for _ in range(3):
            status, _, text = post(server.url + "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 4, "stream": True})
            assert status == 200, text
            assert len(events(text)) == 4
        status, _, text = post(server.url + "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 4})
        assert status == 200, text
    finally:
        server.close()
