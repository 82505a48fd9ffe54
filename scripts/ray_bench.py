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
"""

import argparse
import json
import os
import subprocess
import sys
import time


def bench(app, conn, a):
    cmd = [sys.executable, app, "bench", conn, "--json", "--address", a.address, "--resources", a.resources,
           "--requests", str(a.requests), "--in-flight", a.in_flight, "--request-timeout", "60",
           "--name", "b" + str(abs(hash(conn)) % 10**6)]
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0 or not p.stdout.strip().startswith("{"):
        return None, f"rc {p.returncode}: {(p.stderr or p.stdout).strip().splitlines()[-1:] }"
    r = json.loads(p.stdout)
    r["wall_s"] = round(time.monotonic() - t, 1)
    return r, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--app", required=True)
    ap.add_argument("--address", required=True)
    ap.add_argument("--resources", required=True)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--in-flight", default="1,4,16")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    # What ray_cluster_test.sh passes its checks, unused here.
    for unused in ("--tmp", "--worker-pidfile", "--worker-start", "--request-timeout", "--cleave"):
        ap.add_argument(unused)
    ap.add_argument("conns", nargs="+")
    a = ap.parse_args()
    # Stage devices beyond the cluster's own resources ride on them.
    res = json.loads(os.environ.get("CLEAVE_RAY_BENCH_RESOURCES") or a.resources)
    res.setdefault("npu2", {"resources": {"npu": 0.01}})
    a.resources = json.dumps(res)
    rows = []
    failed = 0
    for conn in a.conns:
        folder = os.path.basename(os.path.dirname(conn))
        model = folder.split("-s")[0]
        r, err = bench(a.app, conn, a)
        if r is None:
            print(f"ray_bench: {folder}: {err}", flush=True)
            failed += 1
            continue
        one = next(x for x in r["levels"] if x["in_flight"] == 1)
        compute = [p["compute_mean_ms"] for p in r["placement"]]
        limit = min(1e3 / max(compute), a.cores * 1e3 / sum(compute))
        rows.append({
            "model": model, "stages": r["parts"], "latency_ms": round(one["latency_mean_ms"], 2),
            "compute_ms": round(sum(compute), 2), "slowest_part_ms": round(max(compute), 2),
            "per_hop_overhead_ms": round(r["per_hop_overhead_ms"], 2),
            "limit_rps": round(limit, 1),
            "rps": {x["in_flight"]: round(x["throughput_rps"], 1) for x in r["levels"]},
            "of_limit": {x["in_flight"]: round(x["throughput_rps"] / limit, 2) for x in r["levels"]},
            "errors": sum(x["errors"] for x in r["levels"]),
        })
        print(f"ray_bench: {folder}: {json.dumps(rows[-1])}", flush=True)
    for row in rows:
        base = next((b for b in rows if b["model"] == row["model"] and b["stages"] == 1), None)
        if base is not None and row["stages"] > 1:
            extra = (row["latency_ms"] - row["compute_ms"]) - (base["latency_ms"] - base["compute_ms"])
            row["overhead_per_added_hop_ms"] = round(extra / (row["stages"] - 1), 2)
    print(json.dumps(rows, indent=1))
    levels = sorted({k for r in rows for k in r["rps"]})
    print(f"{'model':<6} {'k':>2} {'lat ms':>8} {'comp ms':>8} {'+hop ms':>8} " + " ".join(f"{'rps@' + str(k):>8}" for k in levels)
          + f" {'limit':>7} " + " ".join(f"{'of@' + str(k):>6}" for k in levels))
    for r in rows:
        print(f"{r['model']:<6} {r['stages']:>2} {r['latency_ms']:>8.1f} {r['compute_ms']:>8.1f} "
              f"{r.get('overhead_per_added_hop_ms', float('nan')):>8.2f} "
              + " ".join(f"{r['rps'].get(k, float('nan')):>8.1f}" for k in levels)
              + f" {r['limit_rps']:>7.1f} " + " ".join(f"{r['of_limit'].get(k, float('nan')):>6.2f}" for k in levels))
    print(f"ray_bench: {len(rows)} benched, {failed} failed", flush=True)
    sys.stdout.flush()
    os._exit(1 if failed else 0)


if __name__ == "__main__":
    main()
