"""Decoder LLMs from Python: partition with state pairs, then Runner.generate streams the
tokens. The models come from scripts/testdata/make_decoder_models.py (random weights); the
oracle, scripts/oracles/check_generate.py, decodes the whole model on onnxruntime without a
cache, never through cleave."""

import json
import pathlib
import subprocess
import sys

import pytest

import cleave

ROOT = pathlib.Path(__file__).resolve().parents[2]
GPT_STATE = {f"cache.{i}.{kv}_in": f"cache.{i}.{kv}_out" for i in range(4) for kv in "kv"}


@pytest.fixture(scope="module")
def decoders(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("decoders")
    subprocess.run([sys.executable, str(ROOT / "scripts/testdata/make_decoder_models.py"), str(out)], check=True)
    return out


def oracle(model: pathlib.Path, prompt: str, n: int, state: dict) -> list:
    flags = [f for i, o in state.items() for f in ("--state", f"{i}={o}")]
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts/oracles/check_generate.py"), str(model),
         "--prompt-ids", prompt, "--max-new-tokens", str(n), *flags],
        check=True, capture_output=True, text=True)
    return list(json.loads(done.stdout)["tokens"])


def test_generate_streams_the_whole_models_tokens_and_keeps_the_caches(decoders: pathlib.Path) -> None:
    llama = decoders / "tiny_llama.onnx"
    want = oracle(llama, "1,2,3", 10, {})
    plan = cleave.load(llama).partition(stages=2)
    runner = plan.runner({"stage1": "ort", "stage2": "ort"})
    g = runner.generate([1, 2, 3], 10)
    first = next(g)
    assert first == want[0]
    assert [first, *g] == want
    stats = g.stats()
    assert len(stats["per_token_ms"]) == 9
    # 4 layers x K and V x [1, 2 heads, 12 tokens, 8] float32, held in the parts.
    assert stats["state_bytes"] == 4 * 2 * 2 * 12 * 8 * 4
    assert all(h > 0 for h in stats["hop_bytes"])
    # The runner still runs plain steps, and a second generation starts afresh.
    assert list(runner.generate([1, 2, 3], 4)) == want[:4]
    # A stop token ends it; sampling repeats with its seed.
    assert list(runner.generate([1, 2, 3], 10, stop=[want[2]]))[-1] == want[2]
    a = list(runner.generate([1, 2, 3], 8, temperature=1.5, top_k=5, seed=3))
    assert a == list(runner.generate([1, 2, 3], 8, temperature=1.5, top_k=5, seed=3))


def test_a_cache_named_otherwise_is_declared_with_state(decoders: pathlib.Path) -> None:
    gpt = decoders / "tiny_gpt.onnx"
    want = oracle(gpt, "5,9", 8, GPT_STATE)
    plan = cleave.load(gpt).partition(stages=2, state=GPT_STATE)
    runner = plan.runner({"stage1": "ort", "stage2": "ort"})
    assert list(runner.generate([5, 9], 8)) == want
    bare = cleave.load(gpt).partition(stages=2).runner({"stage1": "ort", "stage2": "ort"})
    with pytest.raises(cleave.UnsupportedError, match="input 'cache.0.k_in' is neither input_ids"):
        bare.generate([5, 9], 8)
    assert list(bare.generate([5, 9], 8, state=GPT_STATE)) == want
    with pytest.raises(cleave.ArgumentError, match="'cache.0.k_out' is not an input of the model"):
        cleave.load(gpt).partition(stages=2, state={"cache.0.k_out": "cache.0.k_in"})
    with pytest.raises(cleave.ArgumentError):
        bare.generate([5, 9], -1)
    # A prompt as text, encoded by the tokenizer.json beside the model; the tokens as text.
    g = runner.generate("w5 w9", 8)
    assert list(g) == want
    assert g.text() == " ".join(f"w{t}" for t in want)


def test_stages_cut_at_layers_and_count_at_a_context(decoders: pathlib.Path) -> None:
    llama = decoders / "tiny_llama.onnx"
    want = oracle(llama, "1,2,3", 6, {})
    model = cleave.load(llama)
    assert model.state["past_key_values.3.value"] == "present.3.value" and len(model.state) == 8
    assert cleave.load(decoders / "tiny_gpt.onnx").state == {}
    plan = model.partition(stages=2, context=256)
    # Only the residual stream crosses: 32 floats a token, whatever the context.
    runner = plan.runner({"stage1": "ort", "stage2": "ort"})
    g = runner.generate([1, 2, 3], 6)
    assert list(g) == want
    assert g.stats()["hop_bytes"] == [128] * 5
    with pytest.raises(cleave.ArgumentError, match="context= needs stages=N"):
        model.partition(context=256)
