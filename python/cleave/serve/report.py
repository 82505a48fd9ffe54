"""What ``bench`` makes of its timings: the physical limit (the whole source model's best
throughput on this machine's cores, measured in the same run), the cost per hop between parts
against a 1-stage deployment of the same model, and the table both are printed in."""

import os
import threading
import time

from .runtime import whole_model as _whole_model

VIA = {
    "http": "as HTTP POSTs of an .npz to the ingress's own listener",
    "proxy": "as HTTP POSTs of an .npz through Serve's HTTP proxy",
    "handle": "through the Python handle",
}


def physical_limit(source_file, feeds, cores, runs):
    """Requests/s of the whole model on `cores` cores, the best of one session with `cores`
    intra-op threads and `cores` single-thread sessions side by side (which of the two fills
    the cores better depends on the model); `runs` timed runs each."""
    engine, _ = _whole_model(source_file, 1)

    def rate(sessions):
        for run in sessions:
            run(feeds)
        per = max(1, runs // len(sessions))

        def go(run):
            for _ in range(per):
                run(feeds)

        threads = [threading.Thread(target=go, args=(run,)) for run in sessions]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        return per * len(sessions) / (time.perf_counter() - t)

    one = rate([_whole_model(source_file, cores)[1]])
    side = rate([_whole_model(source_file, 1)[1] for _ in range(cores)]) if cores > 1 else one
    return {
        "source": source_file,
        "engine": engine,
        "cores": cores,
        "one_session_rps": one,
        "single_thread_sessions_rps": side,
        "limit_rps": max(one, side),
    }


def cpu_sample():
    """(seconds since boot the machine's cores were busy and idle, {process title: CPU
    seconds}) read from /proc: the processes of a loopback cluster all live on this machine.
    None where /proc is missing."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        tick = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return None
    # guest and guest_nice (fields 9 and 10) are counted in user time already.
    fields = fields[:8]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    per = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2 :].split()
        title = _title(pid, cmd)
        per[title] = per.get(title, 0.0) + (int(rest[11]) + int(rest[12])) / tick
    return (sum(fields) - idle) / tick, idle / tick, per


def _title(pid, cmd):
    """A process as the CPU table groups it: Ray's actor titles say what they serve."""
    if int(pid) == os.getpid():
        return "this bench (client)"
    name = os.path.basename(cmd.split()[0]) if cmd.split() else "?"
    if cmd.startswith("ray::"):
        title = cmd.split()[0][5:]
        if "ProxyActor" in title:
            return "Serve HTTP proxy"
        if "Controller" in title:
            return "Serve controller"
        if title.startswith("ServeReplica:") and title.endswith(":ingress"):
            return "ingress"
        if "PartWorker" in title or title.startswith("ServeReplica:"):
            return "parts"
        return "other Ray workers"
    if name in ("raylet", "gcs_server"):
        return name
    return "other Ray workers" if "ray" in cmd else "other"


def settle(timeout_s=30.0, busy_below=0.3):
    """Waits, up to `timeout_s`, for this machine's cores to go quiet: the actors of a deleted
    deployment exit a while after ``serve.delete`` returns, and spin until then. The cores
    last seen busy, or None without /proc."""
    end = time.monotonic() + timeout_s
    while True:
        before = cpu_sample()
        time.sleep(0.5)
        after = cpu_sample()
        if before is None or after is None:
            return None
        busy = (after[0] - before[0]) / 0.5
        if busy < busy_below or time.monotonic() > end:
            return round(busy, 2)


def cores_used(before, after, wall):
    """Cores each group of processes kept busy between two samples, and the idle ones;
    None without /proc."""
    if before is None or after is None or wall <= 0:
        return None
    used = {t: (s - before[2].get(t, 0.0)) / wall for t, s in after[2].items()}
    used = {t: round(c, 3) for t, c in sorted(used.items(), key=lambda x: -x[1]) if c >= 0.005}
    return {
        "busy": round((after[0] - before[0]) / wall, 3),
        "idle": round((after[1] - before[1]) / wall, 3),
        "by": used,
    }


def add_costs(results, limits, cores):
    """Fills in each benched deployment's cost per hop, ((L_k - C_k) - (L_1 - C_1)) / (k - 1)
    with L the median latency and C the median summed compute of the parts at 1 in flight,
    against the 1-stage deployment of the same source among `results`; its throughput
    against its source's limit; and, per level, the share of the `cores` the parts spent
    computing (throughput times the CPU time of the threads that ran them, summed; the
    compiled plane reports it). That share comes from the same seconds as the throughput, so a
    VM whose speed swings between the rows and the limit moves it less; it counts compute
    slowed by the other parts as work, and misses an engine's other threads: for parts of one
    thread it is the limit's measure."""
    for r in results:
        base = next(
            (
                b
                for b in results
                if b["source"] == r["source"] and b["parts"] == 1 and b.get("around_compute_ms") is not None
            ),
            None,
        )
        r["cost_per_hop_ms"] = None
        if base is not None and r["parts"] > 1 and r.get("around_compute_ms") is not None:
            r["cost_per_hop_ms"] = (r["around_compute_ms"] - base["around_compute_ms"]) / (r["parts"] - 1)
        rate = (limits.get(r["source"]) or {}).get("limit_rps")
        r["limit_rps"] = rate
        for row in r["levels"]:
            row["of_limit"] = row["throughput_rps"] / rate if rate else None
            c = row.get("cpu_sum_mean_ms")
            row["parts_computing"] = row["throughput_rps"] * c / 1e3 / cores if c is not None and cores > 0 else None


def _f(x, width, digits):
    return f"{x:>{width}.{digits}f}" if x is not None else f"{'-':>{width}}"


def print_table(doc):
    results = doc["deployments"]
    levels = sorted({row["in_flight"] for r in results for row in r["levels"]})
    vias = list(dict.fromkeys(r["via"] for r in doc["deployments"])) or [doc["via"]]
    how = " / ".join(VIA[v] for v in vias)
    print(f"on {doc['address']}, requests {how}, {doc['requests']} per in-flight level")
    for lim in doc["limits"].values():
        if "error" in lim:
            print(f"limit: not measured, {os.path.basename(lim['source'])} did not run whole here: {lim['error']}")
            continue
        print(
            f"limit: {lim['limit_rps']:.1f} req/s, {os.path.basename(lim['source'])} whole on {lim['engine']} with "
            f"this machine's {lim['cores']} cores (one {lim['cores']}-thread session "
            f"{lim['one_session_rps']:.1f}/s, {lim['cores']} one-thread sessions side by side "
            f"{lim['single_thread_sessions_rps']:.1f}/s), {doc['limit_measured']}"
        )
    width = max([10] + [len(r["name"]) for r in results])
    print(
        f"{'deployment':<{width}} {'parts':>5} {'plane':<8} {'p50@1 ms':>9} {'compute':>8} {'around':>7} "
        f"{'per hop':>7} | "
        + " ".join(f"{'rps@' + str(k):>7}" for k in levels)
        + " | "
        + " ".join(f"{'of@' + str(k):>5}" for k in levels)
    )
    for r in results:
        rows = {row["in_flight"]: row for row in r["levels"]}
        print(
            f"{r['name']:<{width}} {r['parts']:>5} {(r['data_plane'] or {}).get('kind', '?'):<8} "
            f"{_f(r['latency_at_1_ms'], 9, 1)} {_f(r['compute_at_1_ms'], 8, 1)} {_f(r['around_compute_ms'], 7, 1)} "
            f"{_f(r['cost_per_hop_ms'], 7, 2)} | "
            + " ".join(_f(rows[k]["throughput_rps"] if k in rows else None, 7, 1) for k in levels)
            + " | "
            + " ".join(_f(rows[k].get("of_limit") if k in rows else None, 5, 2) for k in levels)
        )
    print(
        "p50@1: median latency at 1 in flight; compute: the parts' summed compute (median, as each part timed "
        "it); around: the one minus the other; per hop: (around - around of the 1-stage deployment of the same "
        "model) / (parts - 1); of@N: throughput at N in flight over the limit"
    )
    if not any(r["parts"] == 1 for r in results) and any(r["parts"] > 1 for r in results):
        print("per hop needs a 1-stage partition of the same model benched in the same run: give its conn.json too")
    said = set()
    for r in results:
        plane = r["data_plane"] or {}
        if plane.get("why") and (plane.get("kind"), plane["why"]) not in said:
            said.add((plane.get("kind"), plane["why"]))
            print(f"the {plane.get('kind')} data plane: {plane['why']}")
        for p in r["placement"]:
            c = f"{p['compute_mean_ms']:.2f} ms" if p["compute_mean_ms"] is not None else "-"
            print(
                f"  {r['name']}: {p['deployment']:<14} backend {p['backend']:<6} compute {c:>10}  node "
                f"{str(p['node_id'])[:12]}{' (head)' if p['is_head'] else ''}"
            )
        if r.get("into_graph_ms") is not None:
            hop = r.get("hop_in_run_ms")
            print(
                f"  {r['name']}: at 1 in flight, into the graph {r['into_graph_ms']:.2f} ms"
                + (
                    f", between the parts {r['between_parts_ms']:.2f} ms ({hop:.2f} ms a hop)"
                    if hop is not None
                    else ""
                )
                + f", back to the ingress {r['out_of_graph_ms']:.2f} ms, outside the graph (HTTP, .npz, the "
                f"ingress) {r['outside_graph_ms']:.2f} ms (as the parts and the ingress timed them)"
            )
        row = min(r["levels"], key=lambda x: abs(x["in_flight"] - 8), default=None)
        if row is not None and row.get("cores"):
            c = row["cores"]
            print(
                f"  {r['name']}: cores at {row['in_flight']} in flight, this machine's: "
                + ", ".join(f"{t} {v:.2f}" for t, v in c["by"].items() if v >= 0.01)
                + f"; idle {c['idle']:.2f}"
                + (
                    f"; the parts computing {row['parts_computing']:.2f} of the cores (throughput x their "
                    "summed CPU time)"
                    if row.get("parts_computing") is not None
                    else ""
                )
            )
        for row in r["levels"]:
            if row.get("given_up"):
                print(f"{r['name']}: {row['in_flight']} in flight given up {row['given_up']}")
            if row["errors"]:
                print(
                    f"{r['name']}: {row['errors']} requests failed at {row['in_flight']} in flight, first: "
                    f"{row['first_error']}"
                )
