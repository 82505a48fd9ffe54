"""``bench`` and ``verify``: requests timed at several levels in flight, and the outputs and every
boundary tensor compared with the source model run whole."""

import json
import os
import sys
import threading
import time

from . import runtime
from .actors import actor_options
from .cluster import (
    connect,
    deploy,
    describe_placement,
    die,
    ingress_route,
    load_partition,
    parse_counts_or_die,
    parse_resources_or_die,
    print_placement,
    refuse_decoder,
    running_http,
)
from .partition import part_format, served_formats
from .report import add_costs, cores_used, cpu_sample, physical_limit, print_table, settle
from .wire import short_error, write_npz


def model_inputs(model, fmt):
    """[(name, numpy dtype, dims with None where free)] of a model file's inputs."""
    import numpy as np

    if fmt not in (served_formats() or [fmt]):
        die(2, f"{model}: a {fmt or 'unknown'} model, which nothing here runs")
    return [(name, np.dtype(dtype or "float32"), dims) for name, dtype, dims in runtime.model_inputs(model)]


def source_format(partition):
    return part_format({"file": partition.source_file, "format": (partition.raw.get("source") or {}).get("format")})


def random_feeds(source_file, partition, seed):
    """Seeded inputs shaped as the partition's conn.json records its parts were cut for, else
    like the source model's (free dimensions taken as 1)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    recorded = (partition.raw.get("source") or {}).get("shapes") or {}
    feeds = {}
    for name, dt, dims in model_inputs(source_file, source_format(partition)):
        if name not in partition.inputs:
            continue
        cut = recorded.get(name)
        if not isinstance(cut, list) or len(cut) != len(dims):
            cut = [None] * len(dims)
        shape = [
            c if isinstance(c, int) and c > 0 else d if d is not None and d > 0 else 1 for c, d in zip(cut, dims)
        ]
        if np.issubdtype(dt, np.floating):
            feeds[name] = rng.standard_normal(shape).astype(dt)
        elif dt == np.bool_:
            feeds[name] = rng.integers(0, 2, shape).astype(dt)
        else:
            feeds[name] = rng.integers(0, 4, shape).astype(dt)
    return feeds


def reference_run(source_file, feeds, names):
    """The whole source model on its format's default engine, every tensor in `names` read
    out."""
    try:
        return runtime.reference_run(source_file, feeds, names)
    except Exception as e:  # the extension's errors name the file and the tensor
        die(2, short_error(e))


# How bench sends its requests (--via).
VIAS = ("http", "proxy", "handle")


def percentile(values, q):
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else float("nan")


def run_load(call, count, in_flight):
    """`count` calls of `call()` (which answers what the parts said of their times) with `in_flight` of
    them outstanding at any time; given up once `in_flight` calls in a row (at least two)
    have failed, so a deployment that stopped answering costs one request timeout, not
    `count` of them."""
    lock = threading.Lock()
    state = {"next": 0, "failing": 0}
    lat, compute, errors = [], [], []

    def worker():
        while True:
            with lock:
                if state["next"] >= count or state["failing"] >= max(2, in_flight):
                    return
                state["next"] += 1
            t = time.perf_counter()
            try:
                times = call()
            except Exception as e:
                with lock:
                    errors.append(short_error(e) or type(e).__name__)
                    state["failing"] += 1
                continue
            dt = time.perf_counter() - t
            with lock:
                state["failing"] = 0
                lat.append(dt)
                compute.append(times)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(in_flight)]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.perf_counter() - t0, lat, compute, errors


PATH_KEYS = ("into_graph_ms", "between_parts_ms", "hop_in_run_ms", "out_of_graph_ms", "outside_graph_ms")


def path_at_one(lat, compute):
    """Where the latency around the compute went, as the compiled plane timed it on its node's
    clock (medians over the requests): into the graph (the ingress handing the first part the
    request), between the parts (the later parts' ``in_s`` summed; in a chain of stages, the
    hops), out of the graph (the last part's end to the ingress holding its results), and the
    rest, outside the graph (the client's HTTP, the .npz read and written, the ingress). Empty
    where the parts did not report those times (the handles plane, parts on other nodes)."""
    import numpy as np

    rows = [
        (latency, parts)
        for latency, parts in zip(lat, compute)
        if parts and all("in_s" in p for p in parts) and any("out_s" in p for p in parts)
    ]
    if not rows:
        return {}
    into = [parts[0]["in_s"] for _, parts in rows]
    between = [sum(p["in_s"] for p in parts[1:]) for _, parts in rows]
    back = [min(p["out_s"] for p in parts if "out_s" in p) for _, parts in rows]
    outside = [latency - sum(p["compute_s"] + p["in_s"] for p in parts) - b for (latency, parts), b in zip(rows, back)]
    n = len(rows[0][1])
    return {
        "into_graph_ms": float(np.median(into)) * 1e3,
        "between_parts_ms": float(np.median(between)) * 1e3,
        "hop_in_run_ms": float(np.median(between)) * 1e3 / (n - 1) if n > 1 else None,
        "out_of_graph_ms": float(np.median(back)) * 1e3,
        "outside_graph_ms": float(np.median(outside)) * 1e3,
    }


def handle_caller(handle, feeds, timeout_s):
    def call():
        r = handle.infer.remote(feeds).result(timeout_s=timeout_s)
        return r["parts"]

    return call


def http_caller(host, port, name, feeds, timeout_s):
    """Requests as any HTTP client sends them: the .npz body made once, one connection per
    client thread, the reply read whole and its header parsed."""
    import http.client

    body = write_npz(feeds)
    local = threading.local()

    def call():
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
        try:
            conn.request("POST", f"/{name}", body=body, headers={"content-type": "application/octet-stream"})
            r = conn.getresponse()
            data = r.read()
        except (OSError, http.client.HTTPException):
            local.conn = None
            conn.close()
            raise
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {data[:200].decode(errors='replace')}")
        return json.loads(r.headers.get("x-cleave-parts") or "[]")

    return call


def _levels_or_die(args):
    try:
        levels = sorted({int(x) for x in args.in_flight.split(",") if x.strip()})
    except ValueError:
        die(2, f"--in-flight {args.in_flight!r} is not a comma-separated list of counts")
    if not levels or levels[0] < 1 or args.requests < 1:
        die(2, "--requests and every --in-flight count must be at least 1")
    return levels


def _names(args, partitions):
    """One application name per partition: --name or the stem, with its part count where
    the stem repeats (the 1-, 2- and 4-stage cuts of one model share a stem), numbered after
    that."""
    names = []
    for p in partitions:
        base = args.name or p.stem
        name, n = base, 1
        if name in names:
            name = base = f"{base}-{len(p.parts)}p"
        while name in names:
            n += 1
            name = f"{base}-{n}"
        names.append(name)
    return names


def cmd_bench(args):
    """Each partition deployed, timed at every in-flight level and deleted in turn (so no
    deployment takes cores from another's); then, with none left running, the whole source
    model's limit on this machine's cores; then the table."""
    levels = _levels_or_die(args)
    partitions = [load_partition(c) for c in args.conn]
    for p in partitions:
        refuse_decoder(p, "bench")
    ray = connect(args.address, args.timeout)
    results, feeds_of, kept = [], {}, False
    for partition, name in zip(partitions, _names(args, partitions)):
        r, feeds, deployed = _bench_one(ray, args, partition, name, levels)
        results.append(r)
        # Kept by --keep, or found running and reused: not deleted, so not idle for the limit.
        kept = kept or args.keep or not deployed
        if r["source"] and r["source"] not in feeds_of:
            feeds_of[r["source"]] = feeds
    limits = {}
    busy = None
    if args.cores > 0:
        busy = None if kept or not feeds_of else settle()
        for source, feeds in feeds_of.items():
            try:
                before = cpu_sample()
                t = time.monotonic()
                limits[source] = physical_limit(source, feeds, args.cores, max(10, args.requests))
                # What else held the cores meanwhile: a limit read low says why here.
                limits[source]["cores_while_measured"] = cores_used(before, cpu_sample(), time.monotonic() - t)
            except Exception as e:  # the timings taken so far still stand
                limits[source] = {"source": source, "error": short_error(e) or type(e).__name__}
    add_costs(results, limits, args.cores)
    doc = {
        "address": args.address,
        "via": args.via,
        "requests": args.requests,
        "limits": limits,
        "limit_measured": "measured after the benchmark with deployments of it still running (--keep, or "
        "found running and reused)"
        if kept
        else "measured after the benchmark, its deployments deleted"
        + (f" (the machine still {busy:g} cores busy 30 s on)" if busy is not None and busy >= 0.3 else ""),
        "deployments": results,
    }
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print_table(doc)
    return 1 if any(row["errors"] for r in results for row in r["levels"]) else 0


def _bench_one(ray, args, partition, name, levels):
    """(result, the feeds it sent, whether this call deployed it) for one partition."""
    import numpy as np
    from ray import serve

    handle, deployed = deploy(ray, args, partition, name, reuse=True)
    try:
        have_source = bool(partition.source_file and os.path.exists(partition.source_file))
        feeds = random_feeds(partition.source_file, partition, 0) if have_source else _feeds_from_part(partition)
        desc = describe_placement(handle)
        client_timeout = args.request_timeout + 10
        route = ingress_route(desc) if args.via == "http" else None
        via = args.via if args.via != "http" or route else "proxy"
        if via == "http":
            call = http_caller(route[0], route[1], "", feeds, client_timeout)
        elif via == "proxy":
            host, port = running_http(args)
            call = http_caller(host, port, name, feeds, client_timeout)
        else:
            call = handle_caller(handle, feeds, client_timeout)
        for _ in range(max(0, args.warmup)):
            call()
        rows = []
        per_part = None
        at_one = None
        for k in levels:
            before = cpu_sample()
            wall, lat, compute, errors = run_load(call, args.requests, k)
            row = {
                "in_flight": k,
                "requests": args.requests,
                "ok": len(lat),
                "errors": len(errors),
                "throughput_rps": len(lat) / wall if wall > 0 else 0.0,
                # None, not NaN, where nothing answered: NaN is not JSON.
                "latency_p50_ms": percentile(lat, 50) * 1e3 if lat else None,
                "latency_p90_ms": percentile(lat, 90) * 1e3 if lat else None,
                "latency_mean_ms": float(np.mean(lat)) * 1e3 if lat else None,
            }
            row["cores"] = cores_used(before, cpu_sample(), wall)
            if errors:
                row["first_error"] = errors[0]
            if len(lat) + len(errors) < args.requests:
                row["given_up"] = f"after {len(errors)} failed requests, the last of them in a row"
            if compute:
                c = np.asarray([[p["compute_s"] for p in parts] for parts in compute])
                cpu = [[p.get("cpu_s") for p in parts] for parts in compute]
                if all(x is not None for parts in cpu for x in parts):
                    row["cpu_sum_mean_ms"] = float(np.asarray(cpu).sum(axis=1).mean() * 1e3)
                row["compute_sum_mean_ms"] = float(c.sum(axis=1).mean() * 1e3)
                row["compute_sum_p50_ms"] = float(np.median(c.sum(axis=1)) * 1e3)
                if k == 1:
                    per_part = (c.mean(axis=0) * 1e3).tolist()
                    at_one = row
                    row.update(path_at_one(lat, compute))
            rows.append(row)
            if "given_up" in row:
                break
        print(
            f"bench: {name}: "
            + ", ".join(f"{r['throughput_rps']:.1f} req/s at {r['in_flight']}" for r in rows)
            + (f"; level {rows[-1]['in_flight']} given up {rows[-1]['given_up']}" if "given_up" in rows[-1] else ""),
            file=sys.stderr,
            flush=True,
        )
        result = {
            "name": name,
            "conn": partition.path,
            "source": partition.source_file if have_source else None,
            "address": args.address,
            "parts": len(partition.parts),
            "via": via,
            "data_plane": desc.get("data_plane"),
            "levels": rows,
            "latency_at_1_ms": at_one["latency_p50_ms"] if at_one else None,
            "compute_at_1_ms": at_one["compute_sum_p50_ms"] if at_one else None,
            "around_compute_ms": at_one["latency_p50_ms"] - at_one["compute_sum_p50_ms"] if at_one else None,
            **{k: (at_one or {}).get(k) for k in PATH_KEYS},
            "placement": [
                {
                    "deployment": p["deployment"],
                    "backend": p["backend"],
                    "node_id": p.get("node_id"),
                    "is_head": p.get("is_head"),
                    "compute_mean_ms": (per_part[i] if per_part else None),
                }
                for i, p in enumerate(desc["parts"])
            ],
        }
        return result, feeds, deployed
    finally:
        if deployed and not args.keep:
            serve.delete(name)


def _feeds_from_part(partition):
    """Zero inputs shaped by the parts that read them, when the source model is not at hand."""
    import numpy as np

    feeds = {}
    for p in partition.parts:
        for name, dt, dims in model_inputs(p["file"], p["format"]):
            if name in partition.inputs and name not in feeds:
                feeds[name] = np.zeros([d if d is not None and d > 0 else 1 for d in dims], dt)
    return feeds


def cmd_verify(args):
    import numpy as np

    partition = load_partition(args.conn)
    refuse_decoder(partition, "verify")
    if not partition.source_file or not os.path.exists(partition.source_file):
        die(2, f"{partition.path}: its source model {partition.source_file} is not here; verify compares against it")
    name = args.name or partition.stem
    feeds = random_feeds(partition.source_file, partition, args.seed)
    boundary_names = [n for p in partition.parts for n in p["outputs"]]
    want = reference_run(partition.source_file, feeds, list(dict.fromkeys(partition.outputs + boundary_names)))
    ray = connect(args.address, args.timeout)
    from ray import serve

    handle, deployed = deploy(ray, args, partition, name, reuse=True)
    try:
        try:
            got = handle.infer.remote(feeds, boundaries=True).result(timeout_s=args.request_timeout + 10)
        except Exception as e:
            die(1, f"{name}: the request failed: {short_error(e)}")
        desc = describe_placement(handle)
        rows = []
        for kind, names, have in (
            ("output", partition.outputs, got["outputs"]),
            ("boundary", boundary_names, got["boundaries"]),
        ):
            for n in names:
                a = np.asarray(have[n])
                b = np.asarray(want[n])
                if a.shape != b.shape:
                    rows.append(
                        {
                            "tensor": n,
                            "kind": kind,
                            "ok": False,
                            "max_abs_diff": None,
                            "why": f"shape {a.shape} vs {b.shape}",
                        }
                    )
                    continue
                d = np.abs(a.astype(np.float64) - b.astype(np.float64))
                diff = float(d.max()) if a.size else 0.0
                if not np.issubdtype(b.dtype, np.floating):
                    ok, ratio = bool(np.array_equal(a, b)), 0.0 if np.array_equal(a, b) else float("inf")
                elif args.rtol is None and args.atol is None:
                    # As `cleave verify` judges: the relative L2 error of the whole tensor.
                    # Engines round differently on each side of a cut, which trips
                    # element-wise checks on near-zero values; a miswired tensor is off by
                    # about its own size.
                    norm = float(np.linalg.norm(b.astype(np.float64)))
                    rel = float(np.linalg.norm(d)) / max(norm, 1e-30) if a.size else 0.0
                    ok, ratio = rel <= args.tol, rel / args.tol
                else:
                    rtol = 1e-4 if args.rtol is None else args.rtol
                    atol = 1e-5 if args.atol is None else args.atol
                    # Share of the allowed |a-b| <= atol + rtol*|b| used up.
                    ratio = float((d / (atol + rtol * np.abs(b.astype(np.float64)))).max()) if a.size else 0.0
                    ok = bool(np.allclose(a, b, rtol=rtol, atol=atol))
                rows.append({"tensor": n, "kind": kind, "ok": ok, "max_abs_diff": diff, "tolerance_used": ratio})
        # A part on a node without the resource it asked for means the mapping was not applied.
        opts = actor_options(partition, parse_resources_or_die(args.resources), parse_counts_or_die(args)[0])
        placement = []
        for p in desc["parts"]:
            need = opts[p["deployment"]].get("resources") or {}
            res = p.get("node_resources") or {}
            placed = "error" not in p and all(res.get(k, 0) > 0 for k in need)
            placement.append(
                {
                    "deployment": p["deployment"],
                    "backend": p["backend"],
                    "node_id": p.get("node_id"),
                    "is_head": p.get("is_head"),
                    "node_resources": res,
                    "placed_ok": placed,
                }
            )
        ok = all(r["ok"] for r in rows) and all(p["placed_ok"] for p in placement)
        if args.json:
            print(
                json.dumps(
                    {"name": name, "seed": args.seed, "ok": ok, "tensors": rows, "placement": placement}, indent=2
                )
            )
        else:
            how = (
                f"relative L2 error <= {args.tol:g}"
                if args.rtol is None and args.atol is None
                else f"rtol {args.rtol}, atol {args.atol}"
            )
            print(f"{name}: seed {args.seed}, {how}, against {partition.source_file}")
            for r in rows:
                if r["max_abs_diff"] is None:
                    d = r.get("why", "")
                else:
                    d = f"max abs diff {r['max_abs_diff']:.3g}, {100 * r['tolerance_used']:.1f}% of tolerance"
                print(f"  {'ok  ' if r['ok'] else 'FAIL'} {r['kind']:<8} {r['tensor']:<24} {d}")
            print_placement(desc)
            print(f"{name}: {'outputs and boundary tensors match' if ok else 'MISMATCH'}")
        return 0 if ok else 1
    finally:
        if deployed and not args.keep:
            serve.delete(name)
