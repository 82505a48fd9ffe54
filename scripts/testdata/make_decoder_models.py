"""Small decoder LLMs as ONNX graphs, random weights, laid out the way exporters lay them out:
input_ids, attention_mask and position_ids in, logits out, and one layer's KV cache per
past/present pair (shape [batch, kv_heads, sequence, head_dim], the sequence growing by
Concat). The causal mask comes from position_ids and attention_mask once and feeds every
layer, as in Optimum's exports; so do the rotary tables.

    python3 scripts/testdata/make_decoder_models.py OUTDIR [--small] [--big]

writes OUTDIR/tiny_llama.onnx (RMSNorm, rotary positions, grouped-query attention 4/2 heads,
SiLU MLP, cache named past_key_values.N.key/value -> present.N.key/value as Optimum names it)
and OUTDIR/tiny_gpt.onnx (LayerNorm, learned positions, 4/4 heads, lm_head tied to the
embedding, cache named cache.N.k_in -> cache.N.k_out, which no exporter uses: it needs
--state), with OUTDIR/tokenizer.json beside them: Hugging Face's format, a word-level vocabulary
w0 .. w96 split at whitespace, so `--prompt "w1 w2 w3"` is the token ids 1, 2, 3. With --small, also OUTDIR/small_llama.onnx: the Llama layout at hidden 512, 8 layers,
8/4 heads, vocabulary 8000 (26 M parameters, 104 MB), for timings where compute shows. With
--big, OUTDIR/big_llama.onnx and big_llama.onnx_data: hidden 2048, 16 layers, 16/4 heads,
vocabulary 32000 (667 M parameters, 2.67 GB of float32 in external data), for the memory split.
"""
import json
import pathlib
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64


class Builder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self.n = 0

    def w(self, name, *shape, scale=0.5):
        self.inits.append(numpy_helper.from_array((self.rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(self, name, value, dtype=np.int64):
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def op(self, op, inputs, out=None, **attrs):
        self.n += 1
        out = out or f"/{op.lower()}_{self.n}"
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"{op}_{self.n}", **attrs))
        return out


def rms_norm(b, x, name, hidden):
    sq = b.op("Mul", [x, x])
    mean = b.op("ReduceMean", [sq], axes=[-1], keepdims=1)
    eps = b.op("Add", [mean, "eps"])
    inv = b.op("Reciprocal", [b.op("Sqrt", [eps])])
    return b.op("Mul", [b.op("Mul", [x, inv]), norm_weight(b, name, hidden)])


def norm_weight(b, name, hidden):
    b.inits.append(numpy_helper.from_array((1.0 + 0.1 * b.rng.standard_normal(hidden)).astype(np.float32), f"{name}.weight"))
    return f"{name}.weight"


def layer_norm(b, x, name, hidden):
    bias = b.w(f"{name}.bias", hidden, scale=0.1)
    return b.op("LayerNormalization", [x, norm_weight(b, name, hidden), bias], axis=-1, epsilon=1e-5)


def heads(b, x, n, d):
    r = b.op("Reshape", [x, b.const(f"/shape_{b.n}_{n}", [0, 0, n, d])])
    return b.op("Transpose", [r], perm=[0, 2, 1, 3])


def rotate(b, x, cos, sin, d):
    x1 = b.op("Slice", [x, "zero1", "half", "axis3"])
    x2 = b.op("Slice", [x, "half", "full", "axis3"])
    rot = b.op("Concat", [b.op("Neg", [x2]), x1], axis=-1)
    return b.op("Add", [b.op("Mul", [x, cos]), b.op("Mul", [rot, sin])])


def decoder(kind, layers=4, hidden=32, n_heads=4, n_kv=2, ffn=64, vocab=97, max_pos=256, seed=1, check=True):
    b = Builder(seed)
    d = hidden // n_heads
    rep = n_heads // n_kv
    b.const("scale", np.float32(1.0 / np.sqrt(d)), np.float32)
    b.const("neg_big", np.float32(-1e9), np.float32)
    b.const("zero_f", np.float32(0.0), np.float32)
    b.const("one_i", np.int64(1))
    b.const("zero_i", np.int64(0))
    if rep > 1:
        b.const("rep", [1, 1, rep, 1, 1])
    embed = b.w("model.embed_tokens.weight", vocab, hidden, scale=0.5)
    x = b.op("Gather", [embed, "input_ids"], axis=0)
    # The mask, once: key position k is visible to query position q where k <= q and the
    # attention mask keeps k. Shapes [batch, 1, seq, total].
    total = b.op("Gather", [b.op("Shape", ["attention_mask"]), "one_i"], axis=0)
    kpos = b.op("Range", ["zero_i", total, "one_i"])
    qpos = b.op("Unsqueeze", ["position_ids", b.const("ax13", [1, 3])])
    causal = b.op("LessOrEqual", [kpos, qpos])
    keep = b.op("Cast", [b.op("Unsqueeze", ["attention_mask", b.const("ax12", [1, 2])])], to=TensorProto.BOOL)
    mask = b.op("Where", [b.op("And", [causal, keep]), "zero_f", "neg_big"], out="/model/attn_bias")
    if kind == "llama":
        b.const("eps", np.float32(1e-5), np.float32)
        b.const("zero1", [0])
        b.const("half", [d // 2])
        b.const("full", [d])
        b.const("axis3", [3])
        inv = 1.0 / (10000 ** (np.arange(0, d, 2) / d))
        ang = np.outer(np.arange(max_pos), inv)
        ang = np.concatenate([ang, ang], axis=1)
        b.const("model.rotary.cos", np.cos(ang), np.float32)
        b.const("model.rotary.sin", np.sin(ang), np.float32)
        cos = b.op("Unsqueeze", [b.op("Gather", ["model.rotary.cos", "position_ids"], axis=0), b.const("ax1", [1])], out="/model/rotary_cos")
        sin = b.op("Unsqueeze", [b.op("Gather", ["model.rotary.sin", "position_ids"], axis=0), "ax1"], out="/model/rotary_sin")
    else:
        pos = b.w("transformer.wpe.weight", max_pos, hidden, scale=0.5)
        x = b.op("Add", [x, b.op("Gather", [pos, "position_ids"], axis=0)])
    state_in, state_out = [], []
    for i in range(layers):
        p = f"model.layers.{i}"
        norm = rms_norm if kind == "llama" else layer_norm
        h = norm(b, x, f"{p}.input_layernorm", hidden)
        q = heads(b, b.op("MatMul", [h, b.w(f"{p}.q_proj.weight", hidden, n_heads * d)]), n_heads, d)
        k = heads(b, b.op("MatMul", [h, b.w(f"{p}.k_proj.weight", hidden, n_kv * d)]), n_kv, d)
        v = heads(b, b.op("MatMul", [h, b.w(f"{p}.v_proj.weight", hidden, n_kv * d)]), n_kv, d)
        if kind == "llama":
            q, k = rotate(b, q, cos, sin, d), rotate(b, k, cos, sin, d)
            names = (f"past_key_values.{i}.key", f"past_key_values.{i}.value", f"present.{i}.key", f"present.{i}.value")
        else:
            names = (f"cache.{i}.k_in", f"cache.{i}.v_in", f"cache.{i}.k_out", f"cache.{i}.v_out")
        kc = b.op("Concat", [names[0], k], out=names[2], axis=2)
        vc = b.op("Concat", [names[1], v], out=names[3], axis=2)
        state_in += names[:2]
        state_out += names[2:]
        if rep > 1:
            def expand(t):
                u = b.op("Unsqueeze", [t, b.const(f"/ax2_{b.n}", [2])])
                return b.op("Reshape", [b.op("Tile", [u, "rep"]), b.const(f"/kvshape_{b.n}", [0, n_heads, -1, d])])
            kc_, vc_ = expand(kc), expand(vc)
        else:
            kc_, vc_ = kc, vc
        s = b.op("Mul", [b.op("MatMul", [q, b.op("Transpose", [kc_], perm=[0, 1, 3, 2])]), "scale"])
        probs = b.op("Softmax", [b.op("Add", [s, mask])], axis=-1)
        a = b.op("Transpose", [b.op("MatMul", [probs, vc_])], perm=[0, 2, 1, 3])
        a = b.op("Reshape", [a, b.const(f"/ashape_{i}", [0, 0, hidden])])
        x = b.op("Add", [x, b.op("MatMul", [a, b.w(f"{p}.o_proj.weight", hidden, hidden)])])
        h = norm(b, x, f"{p}.post_attention_layernorm", hidden)
        up = b.op("MatMul", [h, b.w(f"{p}.mlp.up_proj.weight", hidden, ffn)])
        act = b.op("Mul", [up, b.op("Sigmoid", [up])])
        x = b.op("Add", [x, b.op("MatMul", [act, b.w(f"{p}.mlp.down_proj.weight", ffn, hidden)])], out=f"/model/layers.{i}/output")
    h = (rms_norm if kind == "llama" else layer_norm)(b, x, "model.norm", hidden)
    if kind == "llama":
        head = b.w("lm_head.weight", hidden, vocab)
    else:
        head = b.op("Transpose", [embed], perm=[1, 0])
    b.op("MatMul", [h, head], out="logits")
    cache = ["batch_size", n_kv if kind == "llama" else n_heads, "past_sequence_length", d]
    present = ["batch_size", cache[1], "total_sequence_length", d]
    inputs = [
        helper.make_tensor_value_info("input_ids", I64, ["batch_size", "sequence_length"]),
        helper.make_tensor_value_info("attention_mask", I64, ["batch_size", "total_sequence_length"]),
        helper.make_tensor_value_info("position_ids", I64, ["batch_size", "sequence_length"]),
    ] + [helper.make_tensor_value_info(n, F, cache) for n in state_in]
    outputs = [helper.make_tensor_value_info("logits", F, ["batch_size", "sequence_length", vocab])]
    outputs += [helper.make_tensor_value_info(n, F, present) for n in state_out]
    g = helper.make_graph(b.nodes, f"tiny_{kind}", inputs, outputs, b.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="cleave-testdata")
    m.ir_version = 8
    if check:
        onnx.checker.check_model(m, full_check=True)
    return m


def word_tokenizer(vocab):
    """A tokenizer.json as the `tokenizers` library writes one: words w0..w{vocab-1}."""
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {f"w{i}": i for i in range(vocab)}, "unk_token": "w0"},
    }


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    onnx.save(decoder("llama"), str(out / "tiny_llama.onnx"))
    onnx.save(decoder("gpt", n_kv=4, seed=2), str(out / "tiny_gpt.onnx"))
    (out / "tokenizer.json").write_text(json.dumps(word_tokenizer(97)))
    if "--small" in sys.argv[2:]:
        m = decoder("llama", layers=8, hidden=512, n_heads=8, n_kv=4, ffn=1376, vocab=8000, max_pos=2048, seed=3)
        onnx.save(m, str(out / "small_llama.onnx"))
    if "--big" in sys.argv[2:]:
        m = decoder("llama", layers=16, hidden=2048, n_heads=16, n_kv=4, ffn=5632, vocab=32000, max_pos=4096, seed=4,
                    check=False)
        path = out / "big_llama.onnx"
        onnx.save(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                  location="big_llama.onnx_data", size_threshold=1024)
        onnx.checker.check_model(str(path), full_check=True)


if __name__ == "__main__":
    main()
