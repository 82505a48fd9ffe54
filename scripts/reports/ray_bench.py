"""Serving figures on the loopback Ray cluster of scripts/ray_cluster_test.sh (which runs this
file instead of its checks when CLEAVE_RAY_DRIVER=bench): the application's own `bench` on every
partition given, once per data plane asked, which prints per partition the latency at 1 in
flight, the parts' compute, the cost per hop against the 1-stage cut of the same model, the
throughput at each level in flight and its ratio to the physical limit (the whole source model's
best throughput on this machine's cores, measured in the same run once the deployments are
deleted).

--planes benches on each data plane named; --lanes N adds, for each 1-stage partition, a run
with N replicas (N lanes); --via http (default) sends the requests over HTTP to the ingress's own listener, --via
proxy through Serve's HTTP proxy; --rows FILE
writes every run's JSON document. CLEAVE_RAY_BENCH_RESOURCES replaces the cluster test's
--resources (e.g. every backend on the head node).
"""

import argparse
import importlib
import json
import os
import subprocess
import sys


def bench(a, conns, plane=None, replicas=None):
    cmd = [sys.executable, a.app, "bench", *conns, "--address", a.address, "--resources", a.resources,
           "--requests", str(a.requests), "--in-flight", a.in_flight, "--request-timeout", "60",
           "--via", a.via, "--cores", str(a.cores), "--json"]
    if plane:
        cmd += ["--data-plane", plane]
    if replicas:
        cmd += ["--replicas", str(replicas)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=3000)


def print_table(app, doc):
    """The application's own table (its report module, imported from the folder)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(app)))
    importlib.import_module(os.path.basename(os.path.abspath(app)) + ".report").print_table(doc)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--app")
    ap.add_argument("--address")
    ap.add_argument("--resources")
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--in-flight", default="1,2,4,8,16")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--via", choices=("handle", "http", "proxy"), default="http")
    ap.add_argument("--planes", default="", help="comma-separated data planes (default: the app's default)")
    ap.add_argument("--lanes", type=int, default=0, help="also bench each 1-stage partition with this many replicas")
    ap.add_argument("--rows", help="write every run's JSON document here")
    # What ray_cluster_test.sh passes its checks, unused here.
    for unused in ("--tmp", "--worker-pidfile", "--worker-start", "--request-timeout", "--cleave", "--baseline"):
        ap.add_argument(unused)
    ap.add_argument("conns", nargs="*")
    a = ap.parse_args()
    # Stage devices beyond the cluster's own resources ride on them.
    res = json.loads(os.environ.get("CLEAVE_RAY_BENCH_RESOURCES") or a.resources)
    if "*" not in res:
        res.setdefault("npu2", {"resources": {"npu": 0.01}})
    a.resources = json.dumps(res)
    singles = []
    for conn in a.conns:
        with open(conn, encoding="utf-8") as f:
            if len(json.load(f).get("parts") or []) == 1:
                singles.append(conn)
    runs = []
    for plane in [p for p in a.planes.split(",") if p] or [None]:
        runs.append((a.conns, plane, None))
        if a.lanes > 1:
            runs += [([c], plane, a.lanes) for c in singles]
    docs, failed = [], 0
    for conns, plane, replicas in runs:
        print(f"== {plane or 'default'} data plane" + (f", {replicas} replicas" if replicas else ""), flush=True)
        p = bench(a, conns, plane, replicas)
        if p.stdout.strip().startswith("{"):
            doc = json.loads(p.stdout)
            print_table(a.app, doc)
            docs.append({"plane": plane, "replicas": replicas or 1, **doc})
        if p.returncode != 0:
            failed += 1
            print(f"ray_bench: rc {p.returncode}: {(p.stderr or p.stdout).strip().splitlines()[-1:]}", flush=True)
    if a.rows:
        with open(a.rows, "w", encoding="utf-8") as f:
            json.dump(docs, f)
    print(f"ray_bench: {len(runs)} runs, {failed} failed", flush=True)
    os._exit(1 if failed else 0)


if __name__ == "__main__":
    main()
