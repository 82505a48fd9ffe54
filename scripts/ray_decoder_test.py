#!/usr/bin/env python3
"""Decoder partitions served as stages on scripts/ray_cluster_test.sh's two-node cluster
(CLEAVE_RAY_DRIVER=decoder): each stage on the node its backend asks for (and its weights
fit), tokens streamed over OpenAI's /v1/completions (Serve's route and the ingress's own) and
through the handle, equal to the whole model's greedy decode by onnxruntime without a cache
(scripts/oracles/check_generate.py); 8 sequences at once; a stage's actor killed, then the
worker node killed, mid-stream, the generation finishing with the same tokens.

Not meant to be run by hand: the shell script starts the cluster and passes its addresses.
"""

import concurrent.futures
import json
import os
import pathlib
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import importlib  # noqa: E402

from ray_cluster_test import (  # noqa: E402
    check,
    cluster_parser,
    finish,
    kill_worker,
    load_module,
    log,
    wait_nodes,
)

PROMPT = [1, 2, 3]
FIGURES = {}
TABLE = []


def oracle(model, n):
    done = subprocess.run(
        [
            sys.executable,
            str(HERE / "oracles/check_generate.py"),
            str(model),
            "--prompt-ids",
            ",".join(map(str, PROMPT)),
            "--max-new-tokens",
            str(n),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return list(json.loads(done.stdout)["tokens"])


def stream(url, n, timeout_s, on_token=None, prompt=PROMPT):
    """Tokens of one streamed completion at `url`, and the seconds to each."""
    body = json.dumps({"prompt": prompt, "max_tokens": n, "stream": True}).encode()
    req = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    tokens, times, t0 = [], [], time.monotonic()
    with urllib.request.urlopen(req, timeout=timeout_s) as r:
        assert r.headers.get("Content-Type", "").startswith("text/event-stream"), r.headers
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk:
                raise RuntimeError(chunk["error"]["message"])
            tokens += chunk["choices"][0]["token_ids"]
            times.append(time.monotonic() - t0)
            if on_token is not None:
                on_token(len(tokens))
    return tokens, times


def in_process(mod, conn, n, concurrent=1, copies=1):
    """Generation in this process on ONNX Runtime over the stages of `conn` (a conn.json dict
    and its folder): (tokens of the first sequence, decode ms per token (median), hop bytes at
    the first and last decode step, tokens/s over `concurrent` sequences on `copies` stage sets)."""
    import asyncio

    gen_mod = importlib.import_module(f"{mod.__name__}.generation")
    raw, folder = conn
    decoder = gen_mod.Decoder(raw, "<conn>")
    sets = [[gen_mod.LocalStage.of(folder, s, engine="ort") for s in decoder.stages] for _ in range(copies)]

    async def run():
        gens = [gen_mod.Generation(decoder, sets[i % copies], PROMPT, n) for i in range(concurrent)]

        async def collect(g):
            return [t async for t in g]

        t = time.perf_counter()
        outs = await asyncio.gather(*(collect(g) for g in gens))
        return gens, outs, time.perf_counter() - t

    gens, outs, took = asyncio.run(run())
    g = gens[0]
    decode = sorted(sec for _, sec, _ in g.steps[1:])
    return outs[0], 1000 * decode[len(decode) // 2], (g.steps[1][2], g.steps[-1][2]), concurrent * n / took


def whole_conn(raw, conn_path):
    """The source model as a one-stage partition (a conn.json dict and its folder)."""
    src = raw["source"]
    part = {"file": src["file"], "inputs": src["inputs"], "outputs": src["outputs"], "state": src["state"]}
    return {"source": src, "parts": [part]}, os.path.dirname(conn_path)


def node_of(live, backend):
    fits = [n["NodeID"] for n in live if n["Resources"].get(backend, 0) > 0]
    return fits[0] if len(fits) == 1 else None


def test_decoder(ray, serve, mod, a, i, conn, live):
    raw = json.load(open(conn))
    source = os.path.normpath(os.path.join(os.path.dirname(conn), raw["source"]["file"]))
    n = a.tokens
    want = oracle(source, n)
    name = f"dec{i}"
    # Backends no node declares (stage1, stage2, ... of a bare --stages cut) go anywhere.
    resources = json.loads(a.resources)
    resources.update({p["backend"]: {} for p in raw["parts"] if p["backend"].startswith("stage")})
    app = mod.decoder_app.build_decoder_app(conn, resources, name=name, ingress_port=0, step_timeout_s=60)
    t = time.monotonic()
    handle = serve.run(app, name=name, route_prefix=f"/{name}")
    desc = handle.describe.remote().result(timeout_s=60)
    label = f"{name} ({len(raw['parts'])} stages, {os.path.basename(conn)})"
    log(f"{label} deployed in {time.monotonic() - t:.1f}s: {json.dumps(desc)[:600]}")
    for st in desc["stages"]:
        want_node = node_of(live, st["backend"])
        if want_node is not None:
            check(
                f"{label}: stage {st['stage']} ({st['backend']}) on its backend's node",
                st.get("node") == want_node,
                f"{str(st.get('node'))[:8]} vs {want_node[:8]}",
            )
    got = list(handle.options(stream=True).generate.remote(PROMPT, max_tokens=n))
    check(f"{label}: handle.generate streams the whole model's greedy tokens", got == want, f"{got} vs {want}")
    route = f"http://127.0.0.1:{a.http_port}/{name}/v1/completions"
    tokens, times = stream(route, n, a.request_timeout * 4)
    check(f"{label}: /v1/completions through Serve's route streams them", tokens == want, f"{tokens}")
    fast = desc.get("http", {}).get("address")
    if check(f"{label}: the ingress listens itself", fast is not None, json.dumps(desc.get("http"))):
        url = f"http://{fast[0]}:{fast[1]}/v1/completions"
        tokens, times = stream(url, n, a.request_timeout * 4)
        check(f"{label}: /v1/completions on the ingress's port streams them", tokens == want, f"{tokens}")
        per = [b - a_ for a_, b in zip(times, times[1:])]
        FIGURES[f"{label}: ms per token streamed"] = round(1000 * sorted(per)[len(per) // 2], 2) if per else None
        with urllib.request.urlopen(f"http://{fast[0]}:{fast[1]}/v1/models", timeout=10) as r:
            check(f"{label}: /v1/models names it", json.load(r)["data"][0]["id"] == name)
    whole_tokens, whole_ms, _, _ = in_process(mod, whole_conn(raw, conn), n)
    split_tokens, split_ms, hop, _ = in_process(mod, (raw, os.path.dirname(conn)), n)
    hops = len(raw["parts"]) - 1
    TABLE.append(
        {
            "partition": label,
            "weights (B)": sum(p.get("weights_bytes", 0) for p in raw["parts"]),
            "context": len(PROMPT) + n,
            "tokens equal": tokens == want == whole_tokens == split_tokens,
            "B a hop a token (first, last step)": f"{hop[0] // max(1, hops)}, {hop[1] // max(1, hops)}",
            "whole, in process (ms/token)": round(whole_ms, 3),
            "split, in process (ms/token)": round(split_ms, 3),
            "served (ms/token)": FIGURES.get(f"{label}: ms per token streamed"),
            "target (ms/token)": round(whole_ms + 0.5 * hops + 1, 3),
        }
    )
    after = handle.describe.remote().result(timeout_s=60)
    check(
        f"{label}: every sequence's cache freed when it ended; describe gives each stage's steps a second",
        all(st.get("sequences") == 0 and st.get("kv_bytes") == 0 and st.get("steps_per_s", 0) > 0
            for st in after["stages"]),
        json.dumps(after["stages"]),
    )
    return name, url if fast else route, want, desc


def test_concurrency(handle_url, want, a):
    n = len(want)
    t = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda _: stream(handle_url, n, a.request_timeout * 8)[0], range(8)))
    took = time.monotonic() - t
    check(
        "8 sequences at once: each streams the same tokens",
        all(o == want for o in outs),
        f"{sum(o == want for o in outs)}/8",
    )
    FIGURES["8 sequences at once: tokens/s"] = round(8 * n / took, 1)
    return 8 * n / took


def test_stage_killed(ray, url, want, desc, a, kill, label):
    """Streams a completion and runs `kill` once a few tokens are out: the stream must end with
    the same tokens."""
    n = len(want)
    fired = threading.Event()

    def on_token(k):
        if k == 4 and not fired.is_set():
            fired.set()
            threading.Thread(target=kill, daemon=True).start()

    t = time.monotonic()
    try:
        tokens, times = stream(url, n, 180, on_token)
    except Exception as e:
        return check(f"{label}: the stream goes on", False, f"{type(e).__name__}: {e}")
    gap = max((b - a_ for a_, b in zip(times, times[1:])), default=0.0)
    FIGURES[f"{label}: longest pause (s)"] = round(gap, 2)
    FIGURES[f"{label}: whole stream (s)"] = round(time.monotonic() - t, 2)
    return check(
        f"{label}: the stream goes on with the same tokens",
        fired.is_set() and tokens == want,
        f"killed={fired.is_set()} {tokens} vs {want}",
    )


def post_status(url, body):
    """(status, body text) of a POST of `body` as JSON."""
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_cleave_binary(serve, a, conn, want):
    """`cleave serve` of a decoder: the binary's own copy of the application, its flags."""
    name = "decbin"
    cmd = [a.cleave, "serve", conn, "--ray", a.address, "--detach", "--name", name, "--resources", a.resources,
           "--http-port", str(a.http_port), "--timeout", "180", "--max-context", "256", "--max-sequences", "1"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    if not check("cleave serve of a decoder deploys", done.returncode == 0, done.stderr[-800:]):
        return
    fast = re.search(r"fast route: (http://\S+/v1/completions)", done.stdout)
    route = re.search(r"route: (http://\S+/v1/completions)", done.stdout)
    check("cleave serve prints the completions routes", fast and route, done.stdout[-800:])
    if fast:
        tokens, _ = stream(fast.group(1), len(want), a.request_timeout * 4)
        check("cleave serve: the decoder streams the whole model's tokens", tokens == want, f"{tokens}")
        status, _ = post_status(fast.group(1), {"prompt": PROMPT, "max_tokens": 256})
        check("cleave serve --max-context: a longer request is answered 413", status == 413, f"{status}")
        # One sequence a stage at most: while one streams, another is told to come back.
        body = json.dumps({"prompt": PROMPT, "max_tokens": 250, "stream": True}).encode()
        with urllib.request.urlopen(urllib.request.Request(fast.group(1), body), timeout=60) as first:
            first.readline()
            status, said = post_status(fast.group(1), {"prompt": PROMPT, "max_tokens": 4})
            rest = first.read().decode()
        check("cleave serve --max-sequences: a stage's refusal reaches the client as 429 with its reason",
              status == 429 and "holds 1 sequences" in said, f"{status} {said[:300]}")
        check("cleave serve: the stream that held the stage ran to its end", rest.rstrip().endswith("data: [DONE]"),
              rest[-200:])
    serve.delete(name)


def main():
    ap = cluster_parser()
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--baseline", help="(the checks' option; unused here)")
    ap.add_argument("conns", nargs="+")
    a = ap.parse_args()
    t_all = time.monotonic()
    mod = load_module(a.app)
    mod.decoder_app = importlib.import_module(f"{mod.__name__}.decoder_app")
    import ray
    from ray import serve

    ray.init(
        address=a.address, logging_level="ERROR", log_to_driver=False, namespace="cleave", _node_ip_address="127.0.0.1"
    )
    live = wait_nodes(ray, 2, 90, want_resource="npu")
    if not check("cluster: head and worker node up", live is not None):
        return finish(t_all)
    mem = {n["NodeID"][:8]: n["Resources"].get("memory") for n in live}
    FIGURES["node memory resource (bytes)"] = mem
    serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": a.http_port})
    served = []
    for i, conn in enumerate(a.conns, 1):
        if served:
            # One application at a time: the last stays up for the checks that follow, and the
            # stages of the one before would hold the nodes' memory.
            serve.delete(served[-1][1][0])
        try:
            served.append((conn, test_decoder(ray, serve, mod, a, i, conn, live)))
        except Exception as e:
            check(f"decoder {conn}", False, f"{type(e).__name__}: {e}")
    # The last partition is the one over both nodes: concurrency and the failures on it.
    if served:
        conn, (name, url, want, desc) = served[-1]
        raw = json.load(open(conn))
        weights = sum(p.get("weights_bytes", 0) for p in raw["parts"])
        if os.environ.get("CLEAVE_RAY_NODE_MEMORY"):
            check(
                "the model's weights exceed each node's memory resource",
                all(m is not None and weights > m for m in mem.values()),
                f"{weights} B over nodes {mem}",
            )
        aggregate = test_concurrency(url, want, a)
        # The whole model's best aggregate on these cores: 8 sequences over one session, and
        # over one session per core.
        best = max(in_process(mod, whole_conn(raw, conn), len(want), 8, copies)[3] for copies in (1, 2))
        FIGURES["8 sequences: the whole model's best aggregate in process (tokens/s)"] = round(best, 1)
        FIGURES["8 sequences: served / whole best"] = round(aggregate / best, 3)
        namespace = mod.decoder_app.ACTOR_NAMESPACE
        head_stage = next((st for st in desc["stages"] if st["backend"] != "npu"), desc["stages"][0])

        def kill_actor():
            ray.kill(ray.get_actor(head_stage["actor"], namespace=namespace), no_restart=False)

        test_stage_killed(ray, url, want, desc, a, kill_actor, f"{name}: stage {head_stage['stage']}'s actor killed")
        if any(st["backend"] == "npu" for st in desc["stages"]):

            def kill_node():
                kill_worker(a.worker_pidfile)
                time.sleep(2)
                subprocess.run(["bash", a.worker_start], check=True)

            test_stage_killed(ray, url, want, desc, a, kill_node, f"{name}: the worker node killed")
    for _conn, (name, *_) in served:
        try:
            serve.delete(name)
        except Exception:
            pass
    if served and a.cleave:
        conn, (_, _, want, _) = served[-1]
        test_cleave_binary(serve, a, conn, want)
    if TABLE:
        cols = list(TABLE[0])
        print("\n== decoder targets ==", flush=True)
        print("| " + " | ".join(cols) + " |")
        print("|" + "---|" * len(cols))
        for row in TABLE:
            print("| " + " | ".join(str(row[c]) for c in cols) + " |", flush=True)
    print("\n== decoder figures ==", flush=True)
    print(json.dumps(FIGURES, indent=1), flush=True)
    return finish(t_all)


if __name__ == "__main__":
    main()
