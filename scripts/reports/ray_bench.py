"""Serving figures on the loopback Ray cluster of scripts/ray_cluster_test.sh (which runs this
file instead of its checks when CLEAVE_RAY_DRIVER=bench): for each partition, the
application's own `bench` at the in-flight levels asked, then per model

* the overhead per hop against the 1-stage deployment of the same model:
  ((latency - compute) of k stages - (latency - compute) of 1 stage) / (k - 1),
  at 1 request in flight;
* each split's throughput against its physical limit,
  min(1 / slowest part's compute, cores / summed compute), the parts' compute as measured
  inside them at 1 in flight.

A partition's model is the part of its folder's name before "-s" (b1m-s2 -> b1m), its stage
count the number of its parts. Prints one JSON document and a table. CLEAVE_RAY_BENCH_RESOURCES
replaces the cluster test's --resources (e.g. every backend on the head node).

--planes benches each partition on each data plane named; --lanes N adds, for a 1-stage
partition, a row with N replicas (N lanes of the compiled plane); --via http sends the
requests over HTTP; --rows FILE writes the rows as JSON. Then, once Ray is stopped,

    python3 ray_bench.py --limit MODEL.onnx --rows FILE [--cores N]

measures the physical limit (the whole model on ONNX Runtime on the same cores: the best of
one session with N threads and N single-thread sessions side by side) and prints the table
with every row's throughput against it (scripts/reports/serve_bench.sh does all of this).
"""

import argparse
import json
import os
import subprocess
import sys
import time


def bench(app, conn, a, plane=None, replicas=None):
    cmd = [sys.executable, app, "bench", conn, "--json", "--address", a.address, "--resources", a.resources,
           "--requests", str(a.requests), "--in-flight", a.in_flight, "--request-timeout", "60",
           "--name", "b" + str(abs(hash((conn, plane, replicas))) % 10**6), "--via", a.via]
    if plane:
        cmd += ["--data-plane", plane]
    if replicas:
        cmd += ["--replicas", str(replicas)]
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0 or not p.stdout.strip().startswith("{"):
        return None, f"rc {p.returncode}: {(p.stderr or p.stdout).strip().splitlines()[-1:] }"
    r = json.loads(p.stdout)
    r["wall_s"] = round(time.monotonic() - t, 1)
    return r, None


def whole_model_limit(model, cores, runs=40):
    """Requests/s of the whole model on ONNX Runtime using every core: one session with
    `cores` intra-op threads, and `cores` single-thread sessions side by side; the best."""
    import threading

    import numpy as np
    import onnxruntime as ort

    def session(threads):
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])

    probe = session(1)
    rng = np.random.default_rng(0)
    feeds = {}
    for i in probe.get_inputs():
        dims = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
        feeds[i.name] = rng.standard_normal(dims).astype(np.float32)

    def rate(sessions):
        for s in sessions:
            s.run(None, feeds)
        per = max(1, runs // len(sessions))

        def go(s):
            for _ in range(per):
                s.run(None, feeds)

        ts = [threading.Thread(target=go, args=(s,)) for s in sessions]
        t = time.perf_counter()
        for th in ts:
            th.start()
        for th in ts:
            th.join()
        return per * len(sessions) / (time.perf_counter() - t)

    one = rate([session(cores)])
    side = rate([session(1) for _ in range(cores)])
    return {"one_session_rps": round(one, 2), "single_thread_sessions_rps": round(side, 2), "limit_rps": round(max(one, side), 2)}


def print_limit_table(rows, limit):
    levels = sorted({int(k) for r in rows for k in r["rps"]})
    print(f"physical limit: {limit['limit_rps']:.1f} requests/s (whole model on ONNX Runtime: one session with all cores "
          f"{limit['one_session_rps']:.1f}/s, single-thread sessions side by side {limit['single_thread_sessions_rps']:.1f}/s)")
    print(f"{'plane':<9} {'stages':>6} {'lat@1 ms':>9} {'compute':>8} {'+hop ms':>8} "
          + " ".join(f"{'rps@' + str(k):>7}" for k in levels) + " " + " ".join(f"{'of@' + str(k):>6}" for k in levels))
    for r in rows:
        rps = {int(k): v for k, v in r["rps"].items()}
        print(f"{r.get('plane') or '-':<9} {r['label']:>6} {r['latency_ms']:>9.1f} {r['compute_ms']:>8.1f} "
              f"{r.get('overhead_per_added_hop_ms', float('nan')):>8.2f} "
              + " ".join(f"{rps.get(k, float('nan')):>7.1f}" for k in levels) + " "
              + " ".join(f"{rps.get(k, float('nan')) / limit['limit_rps']:>6.2f}" for k in levels))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--app")
    ap.add_argument("--address")
    ap.add_argument("--resources")
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--in-flight", default="1,4,16")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--via", choices=("handle", "http"), default="handle")
    ap.add_argument("--planes", default="", help="comma-separated data planes to bench each partition on (default: the app's default)")
    ap.add_argument("--lanes", type=int, default=0, help="also bench each 1-stage partition with this many replicas")
    ap.add_argument("--rows", help="write (or, with --limit, read) the rows as JSON")
    ap.add_argument("--limit", metavar="MODEL.onnx", help="measure the whole model's limit and print the table of --rows")
    # What ray_cluster_test.sh passes its checks, unused here.
    for unused in ("--tmp", "--worker-pidfile", "--worker-start", "--request-timeout", "--cleave"):
        ap.add_argument(unused)
    ap.add_argument("conns", nargs="*")
    a = ap.parse_args()
    if a.limit:
        with open(a.rows, encoding="utf-8") as f:
            rows = json.load(f)
        limit = whole_model_limit(a.limit, a.cores)
        print(json.dumps({"limit": limit, "rows": rows}))
        print_limit_table(rows, limit)
        return
    # Stage devices beyond the cluster's own resources ride on them.
    res = json.loads(os.environ.get("CLEAVE_RAY_BENCH_RESOURCES") or a.resources)
    if "*" not in res:
        res.setdefault("npu2", {"resources": {"npu": 0.01}})
    a.resources = json.dumps(res)
    rows = []
    failed = 0
    planes = [p for p in a.planes.split(",") if p] or [None]
    runs = []
    for conn in a.conns:
        for plane in planes:
            runs.append((conn, plane, None))
            with open(conn, encoding="utf-8") as f:
                if a.lanes > 1 and len(json.load(f).get("parts") or []) == 1:
                    runs.append((conn, plane, a.lanes))
    for conn, plane, replicas in runs:
        folder = os.path.basename(os.path.dirname(conn))
        model = folder.split("-s")[0]
        r, err = bench(a.app, conn, a, plane, replicas)
        if r is None:
            print(f"ray_bench: {folder} ({plane}): {err}", flush=True)
            failed += 1
            continue
        one = next(x for x in r["levels"] if x["in_flight"] == 1)
        compute = [p["compute_mean_ms"] for p in r["placement"]]
        limit = min(1e3 / max(compute), a.cores * 1e3 / sum(compute))
        got_plane = (r.get("data_plane") or {}).get("kind")
        rows.append({
            "model": model, "stages": r["parts"], "label": f"{r['parts']}" + (f"x{replicas}" if replicas else ""),
            "plane": got_plane, "replicas": replicas or 1, "latency_ms": round(one["latency_mean_ms"], 2),
            "compute_ms": round(sum(compute), 2), "slowest_part_ms": round(max(compute), 2),
            "per_hop_overhead_ms": round(r["per_hop_overhead_ms"], 2),
            "limit_rps": round(limit, 1),
            "rps": {x["in_flight"]: round(x["throughput_rps"], 1) for x in r["levels"]},
            "of_limit": {x["in_flight"]: round(x["throughput_rps"] / limit, 2) for x in r["levels"]},
            "errors": sum(x["errors"] for x in r["levels"]),
        })
        print(f"ray_bench: {folder}: {json.dumps(rows[-1])}", flush=True)
    for row in rows:
        base = next((b for b in rows if b["model"] == row["model"] and b["stages"] == 1 and b["replicas"] == 1
                     and b["plane"] == row["plane"]), None)
        if base is not None and row["stages"] > 1:
            extra = (row["latency_ms"] - row["compute_ms"]) - (base["latency_ms"] - base["compute_ms"])
            row["overhead_per_added_hop_ms"] = round(extra / (row["stages"] - 1), 2)
    if a.rows:
        with open(a.rows, "w", encoding="utf-8") as f:
            json.dump(rows, f)
    print(json.dumps(rows, indent=1))
    levels = sorted({k for r in rows for k in r["rps"]})
    print(f"{'model':<6} {'k':>4} {'plane':<9} {'lat ms':>8} {'comp ms':>8} {'+hop ms':>8} " + " ".join(f"{'rps@' + str(k):>8}" for k in levels)
          + f" {'limit':>7} " + " ".join(f"{'of@' + str(k):>6}" for k in levels))
    for r in rows:
        print(f"{r['model']:<6} {r['label']:>4} {r['plane'] or '-':<9} {r['latency_ms']:>8.1f} {r['compute_ms']:>8.1f} "
              f"{r.get('overhead_per_added_hop_ms', float('nan')):>8.2f} "
              + " ".join(f"{r['rps'].get(k, float('nan')):>8.1f}" for k in levels)
              + f" {r['limit_rps']:>7.1f} " + " ".join(f"{r['of_limit'].get(k, float('nan')):>6.2f}" for k in levels))
    print(f"ray_bench: {len(rows)} benched, {failed} failed", flush=True)
    sys.stdout.flush()
    os._exit(1 if failed else 0)


if __name__ == "__main__":
    main()
