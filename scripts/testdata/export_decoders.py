"""Decoder LLMs as their users export them: Optimum and onnxruntime-genai's model builder, from
Hugging Face models built from configs with random weights (nothing is downloaded but pinned
packages).

    python3 scripts/testdata/export_decoders.py DEST          # DEST/decoders-exported/*/model.onnx (cached)
    python3 scripts/testdata/export_decoders.py DEST --small  # DEST/decoders-exported-small/ (cached)

torch, transformers, Optimum and onnxruntime-genai (pinned below) live in a virtual environment
of their own, $CLEAVE_EXPORT_VENV (default ~/.cache/cleave/export-venv), made on first use and
used only to make these models; nothing else imports them. Three models, seeded:

- optimum_llama: a Llama (RMSNorm, rotary positions, grouped-query attention 4/2 heads, SiLU
  MLP; hidden 64, 4 layers, vocabulary 128) through `optimum.exporters.onnx.main_export`, task
  text-generation-with-past: input_ids, attention_mask, position_ids and
  past_key_values.N.key/value in; logits and present.N.key/value out. Its mask reads the past
  length from the shape of past_key_values.0.key.
- optimum_gpt2: GPT-2 (LayerNorm, learned positions, 4 heads; hidden 64, 4 layers) the same way.
- genai_llama: the same Llama through onnxruntime-genai's builder (fp32, cpu): fused
  GroupQueryAttention and SkipSimplifiedLayerNormalization (com.microsoft), no position_ids.

With --small, the same three at hidden 512 and 8 layers (Llama: 8/4 heads; GPT-2: 8 heads),
vocabulary 8000 (about 26 M parameters, 100 MB): for timings where compute shows
(scripts/reports/decode_table.py), not for the tests.

Each folder holds model.onnx (genai_llama also model.onnx.data) and tokenizer.json: Hugging Face's
format, a word-level vocabulary w0 .. w127, so `--prompt "w1 w2 w3"` is the ids 1, 2, 3. The
weights are drawn wider than the configs' defaults so that greedy decoding varies its tokens (a
wiring bug then changes them). The folder is written whole or not at all, with a stamp named
after this script's hash.
"""
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

PACKAGES = (
    "torch==2.15.0",
    "transformers==4.57.6",
    "optimum==2.1.0",
    "optimum-onnx==0.1.0",
    "onnxruntime-genai==0.12.2",
    "onnx-ir==1.1.0",
    "onnx==1.23.2",
    "onnxruntime==1.32.0",
)
MODELS = ("optimum_llama", "optimum_gpt2", "genai_llama")
VOCAB = 128


def stamp_of():
    return hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()[:16]


def venv_python():
    venv = pathlib.Path(os.environ.get("CLEAVE_EXPORT_VENV", pathlib.Path.home() / ".cache/cleave/export-venv"))
    python = venv / "bin" / "python"
    want = {p.split("==")[0]: p.split("==")[1] for p in PACKAGES}
    probe = [str(python), "-c",
             "import importlib.metadata as m, json, sys; w = json.loads(sys.argv[1]); "
             "sys.exit(any(m.version(k) != v for k, v in w.items()))", json.dumps(want)]
    if python.exists() and subprocess.run(probe, capture_output=True, check=False).returncode == 0:
        return python
    print(f"installing {' '.join(PACKAGES)} into {venv} (used only to make test models; about 6 GB)")
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    *PACKAGES], check=True)
    subprocess.run(probe, check=True)
    return python


def save_tokenizer(folder):
    """A word-level tokenizer (w0 .. w127, split at whitespace) in Hugging Face's files."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(VOCAB)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0", eos_token=f"w{VOCAB - 1}").save_pretrained(folder)


def make(out, small):
    """Runs inside the export venv: writes the models into out."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from optimum.exporters.onnx import main_export
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(7)
    src = out / "hf"
    vocab, hidden, layers, heads, positions = (8000, 512, 8, 8, 2048) if small else (VOCAB, 64, 4, 4, 256)
    llama = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
                        num_attention_heads=heads, num_key_value_heads=heads // 2, max_position_embeddings=positions,
                        initializer_range=0.2 if not small else 0.02, eos_token_id=VOCAB - 1, bos_token_id=1)
    gpt2 = GPT2Config(vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=heads, n_positions=positions,
                      initializer_range=0.2 if not small else 0.02, eos_token_id=VOCAB - 1, bos_token_id=1)
    for name, model in (("llama", LlamaForCausalLM(llama)), ("gpt2", GPT2LMHeadModel(gpt2))):
        model.eval().save_pretrained(src / name)
        save_tokenizer(src / name)
        main_export(str(src / name), output=out / f"optimum_{name}", task="text-generation-with-past")
        shutil.copy(src / name / "tokenizer.json", out / f"optimum_{name}" / "tokenizer.json")
    subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-m", str(src / "llama"),
                    "-i", str(src / "llama"), "-o", str(out / "genai_llama"), "-p", "fp32", "-e", "cpu",
                    "-c", str(src / "cache")], check=True, stdout=subprocess.DEVNULL)
    shutil.rmtree(src)


def fetch(dest, small=False):
    out = dest / ("decoders-exported-small" if small else "decoders-exported")
    stamp = out / f".complete-{stamp_of()}"
    if stamp.exists():
        print(f"exported decoders already in {out}")
        return
    python = venv_python()
    dest.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=".decoders-exported-", dir=dest))
    try:
        subprocess.run([str(python), __file__, "--make", str(tmp), *(["--small"] if small else [])], check=True)
        missing = [m for m in MODELS
                   if not (tmp / m / "model.onnx").is_file() or not (tmp / m / "tokenizer.json").is_file()]
        if missing:
            raise RuntimeError(f"the exporters did not write {missing}")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    (tmp / stamp.name).touch()
    tmp.chmod(0o755)
    old = dest / f".decoders-exported-old-{stamp_of()}"
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.rename(old)
    tmp.rename(out)
    shutil.rmtree(old, ignore_errors=True)
    print(f"exported decoders written to {out}")


def main():
    args = sys.argv[1:]
    small = "--small" in args
    args = [a for a in args if a != "--small"]
    if len(args) == 2 and args[0] == "--make":
        make(pathlib.Path(args[1]), small)
    elif len(args) == 1:
        fetch(pathlib.Path(args[0]), small)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
