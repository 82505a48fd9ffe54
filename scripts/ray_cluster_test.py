#!/usr/bin/env python3
"""The checks of scripts/ray_cluster_test.sh, run inside its namespaces against its two-node
cluster: placement, equality with the whole model (Python handle and HTTP), throughput, an
exported application, a killed and restarted worker node, an unreachable address.

Not meant to be run by hand: the shell script starts the cluster and passes the addresses,
the worker node's pid file and the command that starts the worker node again.
"""

import argparse
import importlib.util
import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

RESULTS = []
FIGURES = {}


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def check(name, ok, detail=""):
    RESULTS.append((name, bool(ok), detail))
    log(f"{'PASS' if ok else 'FAIL'} {name}{(': ' + detail) if detail else ''}")
    return ok


def run_app(args, app, timeout_s):
    """Runs the application (its package folder) with `args`; (rc, stdout, stderr, seconds)."""
    return run_cmd([sys.executable, app] + args, timeout_s)


def run_cmd(cmd, timeout_s):
    """Runs `cmd`; (rc, stdout, stderr, seconds). A run past its time is killed with its
    process group, so a hang becomes a failure rather than a stuck test. A group, not a
    session: a session of its own is an autogroup of its own, which shares the cores with
    Ray's session as a whole (see test_idle_deployment_leaves_the_cores)."""
    t = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, process_group=0)
    try:
        out, err = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return 124, out, err + f"\n(killed after {timeout_s}s)", time.monotonic() - t
    return p.returncode, out, err, time.monotonic() - t


def tail(text, n=6):
    # Ray's own log lines ("[2026-11-25 22:54:59,410 W 939 941] network_util.cc...") would
    # hide the error they come before.
    lines = [ln for ln in text.strip().splitlines() if not re.match(r"\[\d{4}-\d\d-\d\d [\d:,]+ [A-Z] \d+ \d+\]", ln)]
    return "\n".join(lines[-n:])


def load_module(path):
    """The application's package at `path` (a folder), imported as `ray_app_under_test`."""
    spec = importlib.util.spec_from_file_location("ray_app_under_test", os.path.join(path, "__init__.py"),
                                                  submodule_search_locations=[path])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def nodes(ray):
    return [n for n in ray.nodes() if n.get("Alive")]


def wait_nodes(ray, count, limit_s, want_resource=None):
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        live = nodes(ray)
        if len(live) >= count and (want_resource is None or any(want_resource in n["Resources"] for n in live)):
            return live
        time.sleep(0.5)
    return None


def expected_node(live, need):
    """The node that alone can host a part asking for custom resources `need`: with none
    asked, the head (the test declares every cpu-like backend there)."""
    fits = [n for n in live if all(n["Resources"].get(k, 0) > 0 for k in need)]
    if not need:
        fits = [n for n in live if "node:__internal_head__" in n["Resources"]]
    return fits[0]["NodeID"] if len(fits) == 1 else None


def check_placement(ray, mod, label, handle, partition, resources):
    opts = mod.actor_options(partition, resources)
    live = nodes(ray)
    desc = handle.describe.remote().result(timeout_s=30)
    good = True
    where = []
    for p in desc["parts"]:
        need = opts[p["deployment"]].get("resources") or {}
        want = expected_node(live, need)
        got = p.get("node_id")
        role = "head" if p.get("is_head") else "worker"
        where.append(f"{p['deployment']}->{role}:{str(got)[:8]}")
        if want is None or got != want:
            good = False
    check(f"{label}: each part on the node its resources demand", good, ", ".join(where))
    return desc


def compare(mod, got, want, tol=1e-3):
    """Relative L2 error per tensor, as `cleave verify` judges (a miswired tensor is off by
    about its own size); (mismatched names, largest absolute difference)."""
    import numpy as np

    worst = 0.0
    bad = []
    for n, b in want.items():
        if n not in got:
            bad.append(f"{n} missing")
            continue
        a = np.asarray(got[n])
        if a.shape != b.shape:
            bad.append(n)
            continue
        d = np.linalg.norm(a.astype(np.float64) - b.astype(np.float64))
        if d > tol * max(float(np.linalg.norm(b.astype(np.float64))), 1e-30):
            bad.append(n)
        if a.shape == b.shape and a.size:
            worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))))
    return bad, worst


def http_infer(port, name, feeds, boundaries, timeout_s, host="127.0.0.1"):
    import numpy as np

    buf = io.BytesIO()
    np.savez(buf, **feeds)
    url = f"http://{host}:{port}/{name}{'?boundaries=1' if boundaries else ''}"
    req = urllib.request.Request(url, data=buf.getvalue(), method="POST", headers={"content-type": "application/octet-stream"})
    with urllib.request.urlopen(req, timeout=timeout_s) as r:
        body = r.read()
        parts = json.loads(r.headers.get("x-cleave-parts") or "[]")
    with np.load(io.BytesIO(body), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}, parts


def rounded(x):
    """A figure for the log; None (nothing answered, no limit) stays None."""
    return None if x is None else round(x, 2)


def test_partition(ray, serve, mod, a, idx, conn):
    partition = mod.Partition(conn)
    name = f"t{idx}"
    label = f"{name} ({len(partition.parts)} parts, {os.path.basename(os.path.dirname(partition.path))})"
    common = ["--address", a.address, "--name", name, "--resources", a.resources, "--request-timeout", str(a.request_timeout)]
    if a.data_plane:
        common += ["--data-plane", a.data_plane]
    rc, out, err, secs = run_app(["serve", conn, "--detach", "--http-port", str(a.http_port), "--timeout", "180"] + common, a.app, 240)
    if not check(f"{label}: serve --detach deploys", rc == 0, f"{secs:.1f}s" if rc == 0 else f"rc {rc}: {tail(err)}"):
        return None
    print(out.rstrip(), flush=True)
    handle = serve.get_app_handle(name)
    desc = check_placement(ray, mod, label, handle, partition, json.loads(a.resources))
    if a.data_plane:
        plane = handle.describe.remote().result(timeout_s=30).get("data_plane") or {}
        check(f"{label}: served on the {a.data_plane} data plane", plane.get("kind") == a.data_plane, json.dumps(plane)[:300])
        if a.data_plane == "compiled":
            # The ingress's result reader spins between requests; it waits at SCHED_IDLE.
            for _ in range(60):  # the graph is built once the ingress is up: seconds
                if plane.get("state") == "ready":
                    break
                time.sleep(1)
                plane = handle.describe.remote().result(timeout_s=30).get("data_plane") or {}
            readers = (plane.get("waits_as_idle") or {}).get("ingress_readers")
            check(f"{label}: the ingress's result reader waits at the idle policy", (readers or 0) >= 1, json.dumps(plane)[:300])
            # Root here: the parts leave Ray's worker niceness (15) for their own.
            check(f"{label}: the parts run at niceness {mod.compiled.PART_NICENESS}",
                  plane.get("parts_niceness") == [mod.compiled.PART_NICENESS], json.dumps(plane)[:300])
    engines = sorted({p.get("engine", "?") for p in desc["parts"]})
    want = {"tflite": "litert", "onnx": "ort", "circle": "onert:cpu"}
    check(f"{label}: each part runs on its format's engine ({', '.join(engines)})",
          all(p.get("engine") == want[q["format"]] for p, q in zip(desc["parts"], partition.parts)), str(engines))

    # 3-7 s here; 75-295 s when it ran in a session of its own.
    rc, out, err, secs = run_app(["verify", conn, "--json", "--seed", "7"] + common, a.app, 240)
    detail = f"rc {rc}: {tail(err or out)}"
    if rc in (0, 1) and out.strip().startswith("{"):
        v = json.loads(out)
        worst = max((t.get("tolerance_used") or 0.0) for t in v["tensors"])
        detail = f"{len(v['tensors'])} tensors, worst at {100 * worst:.1f}% of the relative L2 bound 1e-3, {secs:.1f}s"
        FIGURES.setdefault("verify_tolerance_used_pct", {})[label] = round(100 * worst, 2)
    check(f"{label}: verify (outputs + boundary tensors vs whole model)", rc == 0, detail)

    # Independent of verify: this process's own reference, through HTTP and through the handle.
    feeds = mod.random_feeds(partition.source_file, partition, 11)
    names = list(dict.fromkeys(partition.outputs + [n for p in partition.parts for n in p["outputs"]]))
    want = mod.reference_run(partition.source_file, feeds, names)
    try:
        got, parts = http_infer(a.http_port, name, feeds, True, a.request_timeout + 10)
        bad, worst = compare(mod, got, want)
        check(f"{label}: HTTP POST .npz ?boundaries=1 equals the whole model", not bad and len(parts) == len(partition.parts),
              f"{len(want)} tensors, max abs diff {worst:.2e}" + (f", mismatched {bad}" if bad else ""))
        # Any client reads the header: part names, backends and timings, no Ray node ids.
        told = sorted({k for p in parts for k in p})
        # (cpu_s, in_s, out_s: the compiled plane's parts say their thread's CPU time too, and
        # on the ingress's node the time their inputs and results took to travel.)
        check(f"{label}: x-cleave-parts tells a client no node ids",
              {"backend", "compute_s", "deployment"} <= set(told)
              <= {"backend", "compute_s", "cpu_s", "deployment", "in_s", "out_s"},
              ", ".join(told))
    except (urllib.error.URLError, OSError, ValueError) as e:
        check(f"{label}: HTTP POST .npz ?boundaries=1 equals the whole model", False, str(e))
    # The same route, answered by the ingress itself (no proxy hop): where describe says.
    route = (desc.get("ingress") or {}).get("http") or {}
    try:
        if not route.get("port") or route.get("error"):
            raise ValueError("describe gives no listener")
        got, parts = http_infer(route["port"], "", feeds, True, a.request_timeout + 10, route["host"])
        bad, worst = compare(mod, got, want)
        check(f"{label}: the ingress's own listener answers the same", not bad and len(parts) == len(partition.parts),
              f"{route.get('host')}:{route.get('port')}, max abs diff {worst:.2e}" + (f", mismatched {bad}" if bad else ""))
    except (urllib.error.URLError, OSError, ValueError) as e:
        check(f"{label}: the ingress's own listener answers the same", False, f"{json.dumps(route)}: {e}")
    # A tensor of the wrong dtype is the client's error: 400 naming the input, never reaching a part.
    first = partition.inputs[0]
    wrong = dict(feeds, **{first: feeds[first].astype("float64" if feeds[first].dtype.name != "float64" else "float32")})
    try:
        http_infer(a.http_port, name, wrong, False, a.request_timeout + 10)
        check(f"{label}: HTTP POST of a wrong dtype answers 400", False, "it answered 200")
    except urllib.error.HTTPError as e:
        reason = e.read().decode(errors="replace")
        check(f"{label}: HTTP POST of a wrong dtype answers 400", e.code == 400 and repr(first) in reason, f"{e.code}: {reason[:200]}")
    except (urllib.error.URLError, OSError, ValueError) as e:
        check(f"{label}: HTTP POST of a wrong dtype answers 400", False, str(e))
    r = handle.infer.remote(feeds, boundaries=True).result(timeout_s=a.request_timeout + 10)
    merged = dict(r["boundaries"])
    merged.update(r["outputs"])
    bad, worst = compare(mod, merged, want)
    check(f"{label}: handle infer(boundaries=True) equals the whole model", not bad, f"max abs diff {worst:.2e}")

    received = (handle.describe.remote().result(timeout_s=60).get("ingress") or {}).get("tensors_received") or {}
    rc, out, err, secs = run_app(["bench", conn, "--json", "--requests", str(a.requests), "--in-flight", "1,8", "--via", "handle",
                                  "--cores", "0"] + common, a.app, 300)
    # The bench's requests do not ask for the boundaries: only graph outputs reach the ingress.
    after = (handle.describe.remote().result(timeout_s=60).get("ingress") or {}).get("tensors_received") or {}
    grew = {n: c - received.get(n, 0) for n, c in after.items() if c != received.get(n, 0)}
    check(f"{label}: bench requests' boundary tensors went part to part, not through the ingress",
          set(grew) == set(partition.outputs) and min(grew.values(), default=0) >= a.requests,
          f"tensors the ingress received during the bench: {grew}")
    if check(f"{label}: bench 1 and 8 in flight", rc == 0 and out.strip().startswith("{"), f"{secs:.1f}s" if rc == 0 else f"rc {rc}: {tail(err + out)}"):
        b = json.loads(out)["deployments"][0]
        FIGURES[label] = {
            "rps": {r["in_flight"]: round(r["throughput_rps"], 1) for r in b["levels"]},
            "p50_ms": {r["in_flight"]: rounded(r["latency_p50_ms"]) for r in b["levels"]},
            "p90_ms": {r["in_flight"]: rounded(r["latency_p90_ms"]) for r in b["levels"]},
            "around_compute_ms": rounded(b["around_compute_ms"]),
            "parts": [(p["deployment"], "head" if p["is_head"] else "worker", str(p["node_id"])[:8],
                       round(p["compute_mean_ms"], 2) if p["compute_mean_ms"] is not None else None) for p in b["placement"]],
        }
    return name, partition, handle, desc


_SPIN = "import sys, time\nn, end = 0, time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    n += 1\nprint(n)"


def work_rate(seconds=3.0, own_session=False):
    """Loops a second that one process per core gets through at the normal policy: what an
    idle deployment leaves of the cores to whatever else runs on them. In Ray's session, or
    in a session of their own (work started from another shell)."""
    procs = [subprocess.Popen([sys.executable, "-c", _SPIN, str(seconds)], stdout=subprocess.PIPE, text=True,
                              start_new_session=own_session) for _ in range(os.cpu_count() or 1)]
    return sum(int(p.communicate()[0]) for p in procs) / seconds


def test_idle_deployment_leaves_the_cores(bare, label):
    """What an idle deployment whose parts span the nodes leaves of the cores: a compiled
    graph's waiters spin (Ray 2.60), at SCHED_IDLE where cleave can put them, but Ray's
    cross-node channel threads at the normal policy. Where the kernel schedules by autogroup
    (sessions share the cores first, then a session's threads by policy and niceness), work
    in Ray's own session is what the policy protects; work in another session faces Ray's
    session as a whole, kept runnable by its spinners (docs/serving.md)."""
    ratios = {}
    for where, own in (("in Ray's session", False), ("in a session of its own", True)):
        now = work_rate(own_session=own)
        ratios[where] = round(now / bare[own], 2) if bare[own] else 0.0
        log(f"{label} idle: work {where} got {ratios[where]:.2f} of the loops a second it got before anything was deployed")
    # Figures, not checks: in Ray's session even spinners at the normal policy yield (sched_yield)
    # to work beside them, so no bound there could fail; in another session it read 0.14-0.26.
    FIGURES["work_beside_idle_deployment"] = ratios


def busy_threads(seconds=3.0, top=10):
    """The threads that took the most CPU over `seconds`, with their policy and niceness: who
    holds the cores when a measurement reads low."""
    def snap():
        got = {}
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().split(b"\0")[0].decode(errors="replace")[:90]
                for tid in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{tid}/stat") as f:
                        st = f.read()
                    rest = st[st.rindex(")") + 2:].split()
                    got[int(tid)] = (st[st.index("(") + 1:st.rindex(")")], cmd, int(rest[11]) + int(rest[12]))
            except (OSError, ValueError):
                continue
        return got
    a = snap()
    time.sleep(seconds)
    b = snap()
    tick = os.sysconf("SC_CLK_TCK")
    rows = sorted(((v[2] - a[t][2]) / tick / seconds, t, v[0], v[1]) for t, v in b.items() if t in a)[::-1][:top]
    out = []
    for cores, tid, comm, cmd in rows:
        try:
            policy = {os.SCHED_OTHER: "other", os.SCHED_IDLE: "idle"}.get(os.sched_getscheduler(tid), "?")
            nice = os.getpriority(os.PRIO_PROCESS, tid)
        except OSError:
            policy, nice = "gone", None
        out.append(f"{cores:.2f} {comm} [{cmd}] {policy} nice {nice}")
    return out


def part_processes():
    """PartWorker processes alive on the machine (both nodes live on it): a deleted
    deployment's should be gone."""
    n = 0
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                n += f.read().startswith(b"ray::PartWorker")
        except (OSError, ValueError):
            continue
    return n


def test_unreachable(a, conn):
    rc, out, err, secs = run_app(["serve", conn, "--address", "127.0.0.1:1"], a.app, 30)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    ok = rc == 2 and len(lines) == 1 and "127.0.0.1:1" in lines[0] and secs < 10
    check("unreachable address: one line, exit 2, fast", ok, f"rc {rc}, {secs:.1f}s, stderr {lines!r}")
    FIGURES["unreachable_s"] = round(secs, 2)


def test_cleave_binary(serve, a, mod, conn):
    """The same application through the cleave binary, which carries its own copy of it."""
    rc, out, err, secs = run_cmd([a.cleave, "serve", conn, "--ray", "127.0.0.1:1"], 30)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    check("cleave serve --ray to an unreachable address: one line, exit 2", rc == 2 and len(lines) == 1 and "127.0.0.1:1" in lines[0],
          f"rc {rc}, {secs:.1f}s, stderr {lines!r}")
    name = "viacleave"
    rc, out, err, secs = run_cmd([a.cleave, "serve", conn, "--ray", a.address, "--detach", "--name", name, "--resources", a.resources,
                                  "--http-port", str(a.http_port), "--timeout", "180"], 240)
    if not check("cleave serve --ray --detach deploys", rc == 0, f"{secs:.1f}s" if rc == 0 else f"rc {rc}: {tail(err + out)}"):
        return
    partition = mod.Partition(conn)
    feeds = mod.random_feeds(partition.source_file, partition, 3)
    want = mod.reference_run(partition.source_file, feeds, partition.outputs)
    r = serve.get_app_handle(name).infer.remote(feeds).result(timeout_s=a.request_timeout + 10)
    bad, worst = compare(mod, r["outputs"], want)
    check("cleave serve: outputs equal the whole model", not bad, f"max abs diff {worst:.2e}")
    serve.delete(name)
    # The 1-stage cut first, then this one: the cost per hop needs both, in one run.
    conns = ([a.baseline] if a.baseline else []) + [conn]
    rc, out, err, secs = run_cmd([a.cleave, "bench"] + conns + ["--ray", a.address, "--runs", "10", "--in-flight", "1,4",
                                 "--json", "--resources", a.resources], 400)
    doc = json.loads(out) if rc == 0 and out.strip().startswith("{") else {}
    got = doc.get("deployments") or []
    levels = [[lv["in_flight"] for lv in d["levels"]] for d in got]
    check("cleave bench --ray: each partition at 1 and 4 in flight", levels == [[1, 4]] * len(conns),
          f"rc {rc}, levels {levels}, {secs:.1f}s" if rc == 0 else f"rc {rc}: {tail(err or out)}")
    limit = (doc.get("limits") or {}).get(partition.source_file) or {}
    ratios_ok = bool(got) and all(
        abs(lv["of_limit"] - lv["throughput_rps"] / limit["limit_rps"]) < 1e-9 for d in got for lv in d["levels"]
    ) if limit.get("limit_rps") else False
    FIGURES["binary_bench_limit"] = {"measured": doc.get("limit_measured"), **limit}
    check("cleave bench --ray: the whole model's limit measured in the run, each level's throughput against it",
          ratios_ok, f"limit {limit.get('limit_rps', 0):.1f} req/s on {limit.get('cores')} cores" if ratios_ok else f"{tail(out)}")
    if a.baseline and len(got) == 2:
        one, k = got
        want = (k["around_compute_ms"] - one["around_compute_ms"]) / (k["parts"] - 1)
        ok = one["parts"] == 1 and k["cost_per_hop_ms"] is not None and abs(k["cost_per_hop_ms"] - want) < 1e-9
        check("cleave bench --ray: cost per hop against the 1-stage cut", ok,
              f"{k['cost_per_hop_ms']:.2f} ms a hop over {k['parts']} parts" if ok else json.dumps(k)[:300])
        FIGURES["binary_bench"] = {d["name"]: {"parts": d["parts"], "p50_at_1_ms": rounded(d["latency_at_1_ms"]),
                                              "cost_per_hop_ms": d["cost_per_hop_ms"],
                                              "of_limit": {lv["in_flight"]: rounded(lv["of_limit"]) for lv in d["levels"]}}
                                   for d in got}


def test_export(serve, a, mod, conn, tmp):
    out_dir = os.path.join(tmp, "exported")
    plane = ["--data-plane", a.data_plane] if a.data_plane else []
    rc, out, err, secs = run_app(["export", conn, out_dir, "--name", "exported", "--resources", a.resources,
                                  "--http-port", str(a.http_port)] + plane, a.app, 60)
    files = sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else []
    package = sorted(os.listdir(os.path.join(out_dir, "ray_app"))) if os.path.isdir(os.path.join(out_dir, "ray_app")) else []
    ok = rc == 0 and {"app.py", "serve_config.yaml", "ray_app"} <= set(files) and "__init__.py" in package
    if not check("export writes app.py, serve_config.yaml, the ray_app package, parts", ok, ", ".join(files) if ok else f"rc {rc}: {tail(err)}"):
        return
    # The app names its files from its own folder: no path of the machine that exported it
    # (serve_config.yaml's working_dir aside, which tells Ray where the folder is on the head).
    exported = [os.path.join(out_dir, f) for f in (os.path.basename(conn), "app.py")]
    absolute = [f for f in exported if os.path.dirname(os.path.abspath(conn)) in open(f).read() or out_dir in open(f).read()]
    check("export: conn.json and app.py name files relative to the exported folder", not absolute, ", ".join(absolute))
    partition = mod.Partition(os.path.join(out_dir, os.path.basename(conn)))
    feeds = mod.random_feeds(partition.source_file, partition, 3)
    want = mod.reference_run(partition.source_file, feeds, partition.outputs)
    env = dict(os.environ, RAY_ADDRESS=a.address)
    t0 = time.monotonic()
    p = subprocess.Popen(["serve", "run", os.path.join(out_dir, "serve_config.yaml")], cwd=tmp, env=env, stdout=subprocess.DEVNULL,
                         stderr=open(os.path.join(tmp, "serve_run.log"), "w"), process_group=0)
    served, detail = False, "no answer within 150s"
    try:
        while time.monotonic() - t0 < 150 and p.poll() is None:
            try:
                got, _ = http_infer(a.http_port, "exported", feeds, False, 10)
                bad, worst = compare(mod, got, want)
                served, detail = not bad, f"up in {time.monotonic() - t0:.1f}s, max abs diff {worst:.2e}"
                break
            except (urllib.error.URLError, OSError, ValueError):
                time.sleep(2)
        if p.poll() is not None and not served:
            detail = f"serve run exited {p.returncode}: " + tail(open(os.path.join(tmp, "serve_run.log")).read())
    finally:
        # Not Ctrl-C: on its way out `serve run` shuts down all of Serve, the other test
        # applications with it. Killed, it leaves the application, deleted here instead.
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        try:
            serve.delete("exported")
        except Exception as e:
            log(f"could not delete the exported application: {e}")
    check("exported folder: `serve run serve_config.yaml` answers over HTTP", served, detail)


def kill_worker(pidfile):
    """SIGKILL to the worker's PID-namespace init and its unshare: the kernel then kills
    every process of that node (raylet, agents, actors) at once, as a power cut would."""
    pid = int(open(pidfile).read().strip())
    victims = [pid]
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            victims += [int(x) for x in f.read().split()]
    except OSError:
        pass
    for v in reversed(victims):
        try:
            os.kill(v, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return victims


def test_node_failure(ray, serve, mod, a, name, partition):
    handle = serve.get_app_handle(name)
    feeds = mod.random_feeds(partition.source_file, partition, 5)
    client_timeout = a.request_timeout + 10
    lock = threading.Lock()
    log_rows = []  # (start, end, ok, message)
    stop = threading.Event()
    started = time.monotonic()

    def load():
        # Bounded in count and in time whatever happens to the cluster.
        for _ in range(400):
            if stop.is_set() or time.monotonic() - started > 120:
                return
            t = time.monotonic()
            try:
                handle.infer.remote(feeds).result(timeout_s=client_timeout)
                row = (t, time.monotonic(), True, "")
            except Exception as e:
                row = (t, time.monotonic(), False, mod.short_error(e))
            with lock:
                log_rows.append(row)

    threads = [threading.Thread(target=load, daemon=True) for _ in range(4)]
    for th in threads:
        th.start()
    time.sleep(2.0)
    with lock:
        before_ok = sum(1 for r in log_rows if r[2])
    t_kill = time.monotonic()
    victims = kill_worker(a.worker_pidfile)
    log(f"killed worker node (pids {victims}) with {before_ok} requests done")
    # Keep the load on until several requests have failed or the window closes.
    while time.monotonic() - t_kill < a.request_timeout * 3 + 20:
        with lock:
            fails = [r for r in log_rows if not r[2] and r[0] >= t_kill - 5]
        if len(fails) >= 8:
            break
        time.sleep(0.5)
    stop.set()
    for th in threads:
        th.join(client_timeout + 5)
    hung = [th for th in threads if th.is_alive()]
    with lock:
        rows = list(log_rows)
    after = [r for r in rows if r[1] >= t_kill]
    fails = [r for r in after if not r[2]]
    longest = max((r[1] - r[0] for r in rows), default=0.0)
    first_fail = min((r[1] for r in fails), default=None)
    msgs = sorted({r[3] for r in fails})
    FIGURES["failure"] = {
        "requests_before_kill_ok": before_ok,
        "failed_after_kill": len(fails),
        "first_error_after_kill_s": round(first_fail - t_kill, 2) if first_fail else None,
        "longest_request_s": round(longest, 2),
        "errors": msgs[:3],
    }
    alive = os.path.exists(f"/proc/{victims[0]}")
    check("node kill: worker processes gone", not alive, f"pids {victims}")
    check("node kill: in-flight and new requests fail with a clear error, none hangs",
          fails and not hung and longest <= client_timeout + 5
          and all(m and "not iterable" not in m and "Traceback" not in m for m in msgs),
          f"{len(fails)} failed, first {FIGURES['failure']['first_error_after_kill_s']}s after the kill, longest request {longest:.1f}s; {msgs[:2]}")

    t_restart = time.monotonic()
    subprocess.run(["bash", a.worker_start], check=False, timeout=60)
    live = wait_nodes(ray, 2, 90, want_resource="npu")
    if not check("node restart: worker node back", live is not None, f"{time.monotonic() - t_restart:.1f}s"):
        return
    FIGURES["failure"]["node_back_s"] = round(time.monotonic() - t_restart, 1)
    # Bounded retries, each bounded: Serve must notice the dead replica and place a new one.
    ok_streak, tries, first_ok, last_err = 0, 0, None, ""
    while time.monotonic() - t_restart < 180 and tries < 120 and ok_streak < 3:
        tries += 1
        t = time.monotonic()
        try:
            r = handle.infer.remote(feeds, boundaries=True).result(timeout_s=client_timeout)
            ok_streak += 1
            first_ok = first_ok or time.monotonic()
        except Exception as e:
            ok_streak = 0
            last_err = mod.short_error(e)
            time.sleep(max(0.0, 1.0 - (time.monotonic() - t)))
    recovered = ok_streak >= 3
    FIGURES["failure"]["recovered_after_restart_s"] = round(first_ok - t_restart, 1) if first_ok else None
    FIGURES["failure"]["retries"] = tries
    if check("node restart: requests succeed again", recovered,
             f"first success {FIGURES['failure']['recovered_after_restart_s']}s after restart, {tries} tries" + ("" if recovered else f"; last error {last_err}")):
        want = mod.reference_run(partition.source_file, feeds, partition.outputs)
        bad, worst = compare(mod, r["outputs"], want)
        check("node restart: results still equal the whole model", not bad, f"max abs diff {worst:.2e}")
        check_placement(ray, mod, f"{name} after restart", handle, partition, json.loads(a.resources))


def guarded(what, fn, *args):
    """A check that raises counts as one failure; the others still run."""
    try:
        return fn(*args)
    except Exception as e:
        import traceback

        traceback.print_exc()
        check(f"{what}: ran to the end", False, f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}")
        return None


def cluster_parser():
    """The arguments scripts/ray_cluster_test.sh gives every driver."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--app", required=True)
    ap.add_argument("--address", required=True)
    ap.add_argument("--resources", required=True)
    ap.add_argument("--worker-pidfile", required=True)
    ap.add_argument("--worker-start", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--http-port", type=int, default=8000)
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--request-timeout", type=float, default=10.0)
    ap.add_argument("--cleave", help="the cleave binary: also serve (and bench) through it")
    return ap


def main():
    ap = cluster_parser()
    ap.add_argument("--data-plane", help="serve every partition on this data plane (default: the application's)")
    ap.add_argument("--baseline", help="a 1-stage cut of the first partition's model, for the binary's cost per hop")
    ap.add_argument("conns", nargs="+")
    a = ap.parse_args()
    t_all = time.monotonic()
    mod = load_module(a.app)

    test_unreachable(a, a.conns[0])

    import ray
    from ray import serve

    ray.init(address=a.address, logging_level="ERROR", log_to_driver=False, namespace="cleave", _node_ip_address="127.0.0.1")
    live = wait_nodes(ray, 2, 90, want_resource="npu")
    if not check("cluster: head and worker node up", live is not None, ", ".join(f"{n['NodeID'][:8]}:{sorted(k for k in n['Resources'] if not k.startswith(('node:', 'memory', 'object')))}" for n in (live or []))):
        return finish(t_all)

    bare = {own: work_rate(own_session=own) for own in (False, True)}
    deployed = []
    for i, conn in enumerate(a.conns, 1):
        t = time.monotonic()
        r = guarded(f"partition {conn}", test_partition, ray, serve, mod, a, i, conn)
        log(f"partition {conn} took {time.monotonic() - t:.1f}s")
        if r:
            deployed.append(r)
            if len(deployed) > 1:
                # Only the first stays up, for the failure test: an idle compiled deployment's
                # channel readers poll, and three of them starve the checks that follow.
                serve.delete(r[0])
                time.sleep(5)
                FIGURES.setdefault("part_processes_after_delete", []).append((r[0], part_processes()))
    if deployed:
        time.sleep(3)  # past the parts' quiet time
        guarded("idle deployment", test_idle_deployment_leaves_the_cores, bare, deployed[0][0])
    if a.cleave:
        t = time.monotonic()
        # Who holds the cores while the binary benches (its limit read 0.3-7.3 requests/s on the
        # compiled plane, against 15-23 on the handles, while it ran in a session of its own).
        samples, done = [], threading.Event()

        def sample():
            while not done.is_set():
                samples.append((round(time.monotonic() - t), busy_threads(3.0, 8)))
                del samples[:-6]

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        guarded("cleave binary", test_cleave_binary, serve, a, mod, a.conns[0])
        done.set()
        sampler.join()
        FIGURES["threads_during_binary_bench"] = samples
        FIGURES["part_processes_after_binary_bench"] = part_processes()
        log(f"cleave binary test took {time.monotonic() - t:.1f}s")
    t = time.monotonic()
    guarded("export", test_export, serve, a, mod, a.conns[0], a.tmp)
    log(f"export test took {time.monotonic() - t:.1f}s")
    if deployed:
        t = time.monotonic()
        guarded("node failure", test_node_failure, ray, serve, mod, a, deployed[0][0], deployed[0][1])
        FIGURES["failure_test_s"] = round(time.monotonic() - t, 1)
    for name, *_ in deployed:
        try:
            serve.delete(name)
        except Exception:
            pass
    return finish(t_all)


def finish(t_all):
    print("\n== figures ==", flush=True)
    print(json.dumps(FIGURES, indent=1), flush=True)
    passed = sum(1 for _, ok, _ in RESULTS if ok)
    failed = len(RESULTS) - passed
    for name, ok, detail in RESULTS:
        if not ok:
            print(f"FAILED: {name}: {detail}", flush=True)
    print(f"checks took {time.monotonic() - t_all:.0f}s", flush=True)
    print(f"ray_cluster_test: {passed} passed, {failed} failed", flush=True)
    sys.stdout.flush()
    os._exit(1 if failed or not RESULTS else 0)


if __name__ == "__main__":
    main()
