"""The oracle for `cleave generate`: greedy decoding of a whole decoder model on onnxruntime,
computed twice: without a cache (the whole sequence again at every step, every past empty) and
with one (each present fed back as the next step's past). The two must give the same tokens,
or the model is not a decoder with a cache; prints them as JSON with the last step's logits.

    python3 scripts/oracles/check_generate.py MODEL.onnx --prompt-ids 1,2,3 --max-new-tokens 8 \
        [--state IN=OUT ...]

Inputs are fed as exporters expect: input_ids, attention_mask (ones over past and new tokens),
position_ids (the new tokens' positions). Pairs named past_key_values.N.* -> present.N.* are
recognised; --state names others.
"""
import argparse
import json
import re

import numpy as np
import onnxruntime as ort

NP = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64, "tensor(int32)": np.int32}


def pairs(sess, declared):
    outs = {o.name for o in sess.get_outputs()}
    found = dict(declared)
    for i in sess.get_inputs():
        m = re.fullmatch(r"past_key_values\.(\d+)\.(key|value)", i.name)
        if m and f"present.{m[1]}.{m[2]}" in outs:
            found.setdefault(i.name, f"present.{m[1]}.{m[2]}")
    return found


def empty(arg):
    dims = [d if isinstance(d, int) else (1 if k == 0 else 0) for k, d in enumerate(arg.shape)]
    return np.zeros(dims, NP[arg.type])


def step(sess, ids, past_len, cache, state):
    feeds = {}
    for arg in sess.get_inputs():
        n = len(ids)
        if arg.name == "input_ids":
            feeds[arg.name] = np.array([ids], NP[arg.type])
        elif arg.name == "attention_mask":
            feeds[arg.name] = np.ones((1, past_len + n), NP[arg.type])
        elif arg.name == "position_ids":
            feeds[arg.name] = np.arange(past_len, past_len + n, dtype=NP[arg.type])[None, :]
        elif arg.name in state:
            feeds[arg.name] = cache.get(arg.name, empty(arg))
        else:
            raise SystemExit(f"input '{arg.name}': not a decoder input this oracle knows")
    names = [o.name for o in sess.get_outputs()]
    got = dict(zip(names, sess.run(None, feeds)))
    return got["logits"][0, -1], {i: got[o] for i, o in state.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--prompt-ids", required=True)
    ap.add_argument("--max-new-tokens", type=int, required=True)
    ap.add_argument("--state", action="append", default=[])
    a = ap.parse_args()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    state = pairs(sess, [s.split("=", 1) for s in a.state])
    prompt = [int(t) for t in a.prompt_ids.split(",")]

    seq = list(prompt)
    for _ in range(a.max_new_tokens):
        logits, _ = step(sess, seq, 0, {}, state)
        seq.append(int(np.argmax(logits)))
    uncached = seq[len(prompt):]

    cache, tokens, fed, past = {}, [], prompt, 0
    for _ in range(a.max_new_tokens):
        logits, cache = step(sess, fed, past, cache, state)
        past += len(fed)
        tokens.append(int(np.argmax(logits)))
        fed = tokens[-1:]
    if tokens != uncached:
        raise SystemExit(f"the model's cached decode {tokens} differs from its uncached {uncached}")
    print(json.dumps({"tokens": tokens, "state": state, "last_logits": [float(v) for v in logits]}))


if __name__ == "__main__":
    main()
