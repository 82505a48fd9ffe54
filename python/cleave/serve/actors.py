"""Where parts run: each backend's Ray actor options (custom resources, GPU shares, CPUs), the
per-backend replica and thread counts, and the report of the node a part landed on."""

import json
import os

CUSTOM_RESOURCE_AMOUNT = 0.01


def actor_options(partition, overrides=None, replicas=None):
    """ray_actor_options for every part (by deployment name) and for "ingress". `replicas` is
    the per-backend count table (see parse_per_backend): a GPU's share shrinks with it."""
    overrides = dict(overrides or {})
    per_backend = {}
    for p in partition.parts:
        per_backend[p["backend"]] = per_backend.get(p["backend"], 0) + per_backend_value(replicas, p["backend"], 1)
    out = {}
    for p in partition.parts:
        b = p["backend"]
        if b in overrides:
            opts = dict(overrides[b] or {})
        elif "*" in overrides:
            opts = dict(overrides["*"] or {})
        else:
            opts = _default_rule(b, per_backend[b])
        opts.setdefault("num_cpus", 0)
        out[p["deployment"]] = opts
    ingress = dict(overrides.get("ingress") or {"resources": {"node:__internal_head__": 0.001}})
    ingress.setdefault("num_cpus", 0)
    out["ingress"] = ingress
    return out


def _default_rule(backend, count):
    low = backend.lower()
    if low == "cpu":
        return {}
    if low.startswith(("gpu", "cuda")):
        return {"num_gpus": round(1.0 / count, 4)}
    return {"resources": {backend: CUSTOM_RESOURCE_AMOUNT}}


def parse_per_backend(text, what):
    """A count per backend from `N` (every backend) or `B=N,B=N` (`*=N` for the ones not
    named), as --replicas and --threads take it."""
    table = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.rpartition("=")
        key = key.strip() if sep else "*"
        try:
            n = int(value)
        except ValueError:
            raise ValueError(
                f"--{what} {text!r}: {value.strip()!r} is not a whole number (give N, or BACKEND=N,BACKEND=N)"
            ) from None
        if n < 1 or not key:
            raise ValueError(f"--{what} {text!r}: {item!r} needs a backend name and a count of at least 1")
        table[key] = n
    return table


def per_backend_value(table, backend, default):
    table = table or {}
    return table.get(backend, table.get("*", default))


def default_threads(opts):
    """Intra-op threads of a part: the CPUs its actor reserves (``num_cpus`` given through
    --resources), else 0: its share of its node's cores, chosen where it runs
    (``node_threads``)."""
    n = opts.get("num_cpus") or 0
    return max(0, int(n))


def usable_cores(cgroup_root="/sys/fs/cgroup"):
    """The cores this process may use: those its affinity allows, fewer where its cgroup's
    CPU quota (cpu.max, cgroup v2, as containers and Ray's own limits set it) is smaller."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        with open(os.path.join(cgroup_root, "cpu.max"), encoding="ascii") as f:
            quota, period = f.read().split()[:2]
        if quota != "max" and int(period) > 0:
            # A quota of 1.5 cores still lets 2 threads make progress.
            cores = min(cores, max(1, -(-int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return cores


def node_threads(share, cgroup_root="/sys/fs/cgroup"):
    """A part's share of this node's usable cores when `share` parts (replicas and lanes
    counted) divide them: all of them for a 1-stage deployment."""
    return max(1, usable_cores(cgroup_root) // max(1, int(share)))


def parse_resources(text):
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"--resources is not JSON: {e}") from None
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise ValueError(
            "--resources must map backend names to ray_actor_options objects, e.g. "
            '\'{"npu": {"resources": {"npu": 1}}}\''
        )
    return value


def shares_cores_by_autogroup(proc="/proc", cgroup_root="/sys/fs/cgroup"):
    """Whether the kernel shares the cores between this process's session and the others
    before it weighs their threads: autogroups on, and the process in the root CPU cgroup
    (cgroup v1's cpu hierarchy at "/", or v2 at "/" or without the cpu controller above it).
    There a compiled graph's spinning waiters take their session's share of the cores from
    work in other sessions, whatever the waiters' policy (docs/serving.md)."""
    try:
        with open(os.path.join(proc, "sys/kernel/sched_autogroup_enabled"), encoding="ascii") as f:
            if f.read().strip() != "1":
                return False
        with open(os.path.join(proc, "self/cgroup"), encoding="ascii") as f:
            lines = [ln.split(":", 2) for ln in f.read().splitlines() if ln.count(":") >= 2]
    except OSError:
        return False
    for _, controllers, path in lines:
        if "cpu" in controllers.split(","):
            return path == "/"
    unified = [path for hierarchy, controllers, path in lines if hierarchy == "0" and not controllers]
    if not unified or unified[0] == "/":
        return True
    # v2: in the root task group unless some ancestor hands the cpu controller down.
    parts = unified[0].strip("/").split("/")
    for depth in range(len(parts)):
        above = os.path.join(cgroup_root, *parts[:depth])
        try:
            with open(os.path.join(above, "cgroup.subtree_control"), encoding="ascii") as f:
                if "cpu" in f.read().split():
                    return False
        except OSError:
            return False
    return True


def node_report():
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    report = {
        "node_id": node_id,
        "node_ip": None,
        "node_resources": {},
        "is_head": False,
        "pid": os.getpid(),
        "autogroup": shares_cores_by_autogroup(),
    }
    try:
        for n in ray.nodes():
            if n.get("NodeID") == node_id:
                res = dict(n.get("Resources") or {})
                report["node_ip"] = n.get("NodeManagerAddress")
                report["is_head"] = "node:__internal_head__" in res
                # Drop Ray's bookkeeping entries: only what a user declared says where a part belongs.
                report["node_resources"] = {
                    k: v
                    for k, v in res.items()
                    if not k.startswith("node:") and k not in ("memory", "object_store_memory")
                }
                break
    except Exception:  # the report is informative; a GCS hiccup must not fail the replica
        pass
    return report


def part_report(spec, session, **extra):
    """What ``describe`` tells of a part: the node it runs on, its engine as opened, and, in
    ``note``, why that engine is not what its backend asked for."""
    report = node_report()
    report.update(
        deployment=spec["deployment"],
        backend=spec["backend"],
        engine=session.engine,
        threads=int(getattr(session, "threads", None) or spec.get("threads") or 1),
        **extra,
    )
    if session.note:
        report["note"] = session.note
    return report
