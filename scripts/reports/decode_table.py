"""Decoders split into stages: per stage count, the tokens against the whole model's, the
per-token time split and whole (same engine, same threads), the bytes between parts per token
at the first and last decode step, and the KV cache the parts hold.

    python3 scripts/reports/decode_table.py CLEAVE [--tokens N] [--engine ort]

Models: scripts/testdata/make_decoder_models.py (tiny_llama: 4 layers, hidden 32, GQA 4/2;
tiny_gpt: 4 layers, MHA, tied lm_head, cache declared with --state; small_llama: 8 layers,
hidden 512, GQA 8/4, 104 MB), random weights. Each split is made with --context at the
length generated, so the stages are balanced by per-token work there.
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
GPT_STATE = [f"cache.{i}.{kv}_in=cache.{i}.{kv}_out" for i in range(4) for kv in "kv"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cleave")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--engine", default="ort")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        d = pathlib.Path(d)
        subprocess.run([sys.executable, str(ROOT / "scripts/testdata/make_decoder_models.py"), str(d), "--small"], check=True)
        print(f"| model | stages | tokens equal | ms/token split | ms/token whole | ratio | bytes/hop/token (first, last step) | KV in parts at {a.tokens + 2} tokens |")
        print("|---|---|---|---|---|---|---|---|")
        for name, state in [("tiny_llama", []), ("tiny_gpt", GPT_STATE), ("small_llama", [])]:
            flags = [f for s in state for f in ("--state", s)]
            for stages in (1, 2, 4):
                out = d / f"{name}{stages}"
                subprocess.run([a.cleave, "partition", str(d / f"{name}.onnx"), "--stages", str(stages), "-o", str(out), "-q",
                                "--context", str(a.tokens + 2), *flags],
                               check=True, capture_output=True)
                engines = ",".join(f"stage{k}={a.engine}" for k in range(1, stages + 1))
                done = subprocess.run([a.cleave, "verify", str(d / f"{name}.onnx"), str(out / f"{name}.conn.json"), "--generate", str(a.tokens),
                                       "--prompt-ids", "1,2", "--reference", a.engine, "--engine", engines, "--json"],
                                      capture_output=True, text=True)
                v = json.loads(done.stdout)
                hops = v["hop_bytes_per_token"]
                split, whole = v["per_token_ms"], v["whole_per_token_ms"]
                print(f"| {name} | {stages} | {v['passed']} | {split:.3f} | {whole:.3f} | {split / whole:.2f} | {hops[0]}, {hops[-1]} | {v['state_bytes']} |")


if __name__ == "__main__":
    main()
