"""Decoders split into stages: per model and stage count, the weights and KV cache each stage
holds at the context, the tokens against the whole model's, the bytes between parts per token
at the first and last decode step, and the per-token time split and whole (same engine, same
threads).

    python3 scripts/reports/decode_table.py CLEAVE [--tokens N] [--context T] [--engine ort] [--repeat R]

Models: scripts/testdata/make_decoder_models.py (tiny_llama: 4 layers, hidden 32, GQA 4/2;
tiny_gpt: 4 layers, MHA, tied lm_head, cache declared with --state; small_llama: 8 layers,
hidden 512, GQA 8/4, 104 MB), random weights; and, where the test data holds them, the real
exports of scripts/testdata/export_decoders.py (Optimum's Llama and GPT-2, onnxruntime-genai's
Llama; hidden 64, 4 layers; and with `export_decoders.py DEST --small` the same at hidden 512,
8 layers, vocabulary 8000). Each split is made with --context T (default: the length
generated), so the stages are balanced by per-token work there; a stage's KV is its layers'
caches (past and present, batch 1) at T tokens, from the declared shapes.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

import onnx

ROOT = pathlib.Path(__file__).resolve().parents[2]
GPT_STATE = [f"cache.{i}.{kv}_in=cache.{i}.{kv}_out" for i in range(4) for kv in "kv"]
ELEM_BYTES = {onnx.TensorProto.FLOAT: 4, onnx.TensorProto.FLOAT16: 2, onnx.TensorProto.BFLOAT16: 2}


def models(own):
    yield "tiny_llama", own / "tiny_llama.onnx", []
    yield "tiny_gpt", own / "tiny_gpt.onnx", GPT_STATE
    yield "small_llama", own / "small_llama.onnx", []
    exported = pathlib.Path(os.environ.get("CLEAVE_TEST_DATA", pathlib.Path.home() / ".cache/cleave/test-data"))
    small = "python3 scripts/testdata/export_decoders.py DEST --small"
    for folder, suffix, how in (("decoders-exported", "", "bash scripts/testdata/fetch-test-data.sh"),
                                ("decoders-exported-small", " (small)", small)):
        for name in ("optimum_llama", "optimum_gpt2", "genai_llama"):
            path = exported / folder / name / "model.onnx"
            if path.is_file():
                yield name + suffix, path, []
            else:
                print(f"({name}{suffix}: not in the test data; {how} makes it)", file=sys.stderr)


def cache_bytes(model, names, tokens):
    """Bytes of the caches `names` at `tokens` of context, batch 1: the past (tokens - 1) the
    stage is fed and the present (tokens) it gives, as a stage holds both during a step."""
    inputs = {i.name: i.type.tensor_type for i in onnx.load(model, load_external_data=False).graph.input}
    total = 0
    for name in names:
        t = inputs[name]
        per_token = ELEM_BYTES.get(t.elem_type, 4)
        for d in t.shape.dim[1:]:
            per_token *= d.dim_value if d.HasField("dim_value") else 1
        total += per_token * (2 * tokens - 1)
    return total


def kib(n):
    return f"{n / 1024:.0f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cleave")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--context", type=int, help="the context the stages are counted at (default: prompt + tokens)")
    ap.add_argument("--engine", default="ort")
    ap.add_argument("--repeat", type=int, default=1, help="runs per row; the times are the medians")
    a = ap.parse_args()
    context = a.context or a.tokens + 2
    with tempfile.TemporaryDirectory() as d:
        d = pathlib.Path(d)
        make = ROOT / "scripts/testdata/make_decoder_models.py"
        subprocess.run([sys.executable, str(make), str(d), "--small"], check=True)
        print(f"| model | stages | weights per stage (KiB) | KV per stage at {context} tokens (KiB) | tokens equal "
              "| bytes/hop/token (first, last step) | ms/token split | ms/token whole | ratio |")
        print("|---|---|---|---|---|---|---|---|---|")
        for name, model, state in models(d):
            flags = [f for s in state for f in ("--state", s)]
            for stages in (1, 2, 4):
                out = d / f"{name}{stages}"
                subprocess.run([a.cleave, "partition", str(model), "--stages", str(stages), "-o", str(out), "-q",
                                "--context", str(context), *flags],
                               check=True, capture_output=True)
                conn = out / f"{model.stem}.conn.json"
                parts = json.loads(conn.read_text())["parts"]
                weights = " / ".join(kib(p["weights_bytes"]) for p in parts)
                kv = " / ".join(kib(cache_bytes(model, list(p.get("state", {})), context)) for p in parts)
                engines = ",".join(f"stage{k}={a.engine}" for k in range(1, stages + 1))
                runs = []
                for _ in range(a.repeat):
                    verify = [a.cleave, "verify", str(model), str(conn), "--generate", str(a.tokens), "--prompt-ids",
                              "1,2", "--reference", a.engine, "--engine", engines, "--json"]
                    done = subprocess.run(verify, capture_output=True, text=True)
                    runs.append(json.loads(done.stdout))
                v = runs[0]
                v["passed"] = all(r["passed"] for r in runs)
                hops = v["hop_bytes_per_token"]
                split = statistics.median(r["per_token_ms"] for r in runs)
                whole = statistics.median(r["whole_per_token_ms"] for r in runs)
                print(f"| {name} | {stages} | {weights} | {kv} | {v['passed']} | {hops[0]}, {hops[-1]} "
                      f"| {split:.3f} | {whole:.3f} | {split / whole:.2f} |")


if __name__ == "__main__":
    main()
