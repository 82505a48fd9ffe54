"""The command line's side of a cluster: connecting (bounded), deploying and checking that every
part can be placed, and telling where the parts run."""

import json
import os
import socket
import sys
import tempfile
import threading
import time

from .actors import actor_options, parse_per_backend, parse_resources
from .decoder_app import is_decoder
from .ingress import DEFAULT_DATA_PLANE, DEFAULT_INGRESS_PORT, build_app
from .listener import is_loopback, parse_ingress_port
from .partition import Partition, settings
from .ray_token import send_token_if_asked, token_probe_available
from .wire import short_error

DEFAULT_HTTP_PORT = 8000


def die(code, message):
    sys.stdout.flush()
    print(f"ray_app: {message}", file=sys.stderr, flush=True)
    # os._exit: a half-made Ray connection can hang the interpreter's normal shutdown.
    os._exit(code)


def load_partition(path):
    try:
        return Partition(path)
    except FileNotFoundError as e:
        die(2, f"{path}: cannot read: {e.strerror}: {e.filename}")
    except (ValueError, KeyError, json.JSONDecodeError) as e:
        die(2, f"{path}: not a usable conn.json: {e}")


def refuse_decoder(partition, command):
    """bench and verify send one request of tensors; a decoder is served token by token."""
    if is_decoder(partition):
        die(
            2,
            f"{partition.path}: a decoder (its model has state pairs): {command} does not take it; serve it "
            "(`cleave serve`) and stream completions from /v1/completions",
        )


def split_address(address):
    addr = address
    for prefix in ("ray://", "http://"):
        if addr.startswith(prefix):
            addr = addr[len(prefix) :]
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def ray_token_hint(environ, home):
    """What to say when ``ray.init`` fails on a port that answers and the cause may be Ray's
    token authentication. Where the mode is unset, ``send_token_if_asked`` has already asked
    the cluster and sent a token it wanted, so only a Ray too old or too new to be asked gets
    the hint."""
    mode = environ.get("RAY_AUTH_MODE")
    if mode is not None and mode.lower() == "token":
        return " (RAY_AUTH_MODE=token: is the token the cluster's?)"
    if mode is not None or token_probe_available():
        return ""
    if os.path.isfile(os.path.join(home, ".ray", "auth_token")):
        return (
            f" ({os.path.join(home, '.ray', 'auth_token')} exists, so a cluster `ray start` began on this machine "
            "asks for that token: set RAY_AUTH_MODE=token, or start the cluster with RAY_AUTH_MODE=disabled)"
        )
    return (
        " (if the cluster asks for Ray's token authentication, set RAY_AUTH_MODE=token and give its token in "
        "RAY_AUTH_TOKEN)"
    )


def connect(address, timeout_s):
    """ray.init on `address`, bounded: a dead or wrong address dies in one line, exit 2."""
    hp = split_address(address)
    if hp is None:
        die(2, f"--address {address!r} is not HOST:PORT (the head's GCS address, as `ray start --head` printed it)")
    host, port = hp
    # A plain TCP probe first: ray.init on a closed port retries for a long while.
    try:
        socket.create_connection((host, port), timeout=min(5.0, timeout_s)).close()
    except OSError as e:
        die(2, f"cannot reach the Ray cluster at {address}: {e.strerror or type(e).__name__}")
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "error")
    import ray

    said = send_token_if_asked(f"{host}:{port}")
    if said is not None and said.startswith("error: "):
        die(2, said[len("error: ") :])
    if said is not None:
        print(said, file=sys.stderr, flush=True)

    kwargs = {"address": f"{host}:{port}", "logging_level": "ERROR", "log_to_driver": False, "namespace": "cleave"}
    if host in ("127.0.0.1", "localhost"):
        kwargs["_node_ip_address"] = "127.0.0.1"
    box = {}

    def attempt():
        # Ray puts the driver's working folder on every worker's sys.path: a neutral empty one,
        # so a numpy.py or onnxruntime/ in the folder cleave was run from is never imported there.
        here = os.getcwd()
        neutral = tempfile.mkdtemp(prefix="cleave-driver-")
        try:
            os.chdir(neutral)
            ray.init(**kwargs)
            box["ok"] = True
        except Exception as e:
            box["error"] = e
        finally:
            os.chdir(here)
            os.rmdir(neutral)

    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        die(
            2,
            f"cannot reach the Ray cluster at {address}: no answer within {timeout_s:g}s (is it a Ray head's GCS "
            "port?)",
        )
    if "error" in box:
        # Its port answered the probe above, so an unsent or wrong token is a likely cause.
        hint = ray_token_hint(os.environ, os.path.expanduser("~"))
        die(2, f"cannot reach the Ray cluster at {address}: {short_error(box['error'])}{hint}")
    # Serve's driver-side INFO lines repeat what this command prints itself. A filter, not a
    # level: Serve sets its logger's level again when it starts.
    import logging

    logging.getLogger("ray.serve").addFilter(lambda record: record.levelno >= logging.WARNING)
    return ray


def check_resources(ray, partition, opts):
    """Fails fast when no node could ever take a part; Serve would wait for one forever."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    for p in partition.parts:
        o = opts[p["deployment"]]
        need = dict(o.get("resources") or {})
        if o.get("num_gpus"):
            need["GPU"] = o["num_gpus"]
        if o.get("num_cpus"):
            need["CPU"] = o["num_cpus"]
        if not any(all(n["Resources"].get(k, 0) >= v for k, v in need.items()) for n in nodes):
            hint = ", ".join(f"{k}={v:g}" for k, v in need.items())
            die(
                1,
                f"no live node offers {hint} for {p['deployment']} (backend {p['backend']}): start one with e.g. "
                f"`ray start --resources='{{\"{p['backend']}\": 1}}'`, or map the backend with --resources",
            )


def app_status(serve, name):
    try:
        st = serve.status().applications.get(name)
    except Exception:
        return None
    return st


def describe_failure(serve, name):
    st = app_status(serve, name)
    if st is None:
        return "no status"
    bits = [str(getattr(st.status, "value", st.status))]
    for dname, d in (st.deployments or {}).items():
        if str(getattr(d.status, "value", d.status)) != "HEALTHY":
            # The constructor's exception, when there is one, is the last line of a traceback.
            msg = [ln.strip() for ln in (d.message or "").strip().splitlines() if ln.strip()]
            why = f" - {msg[0][:200]}" + (f" ... {msg[-1][:300]}" if len(msg) > 1 else "") if msg else ""
            bits.append(f"{dname}: {getattr(d.status, 'value', d.status)}{why}")
    return "; ".join(bits)


# How long a running application found by name has to describe itself before reuse gives up.
REUSE_DESCRIBE_S = 120.0


def _describe_running(handle, name):
    """A running application's describe(), tried until REUSE_DESCRIBE_S pass: on a loaded
    cluster one call can outlast its 30 s, and taking that for "not ours" would replace a
    running application (and, after a bench, delete it)."""
    deadline = time.monotonic() + REUSE_DESCRIBE_S
    while True:
        try:
            return handle.describe.remote().result(timeout_s=30)
        except Exception as e:
            if time.monotonic() > deadline:
                die(
                    2,
                    f"{name}: an application of that name is running but did not describe itself within "
                    f"{REUSE_DESCRIBE_S:g}s ({short_error(e) or type(e).__name__}); give --name another "
                    "name, or delete it",
                )
            print(
                f"note: {name}: describe failed ({short_error(e) or type(e).__name__}); trying again",
                file=sys.stderr,
                flush=True,
            )
            time.sleep(2.0)


def deploy(ray, args, partition, name, *, reuse):
    """Deploys (or, with reuse, keeps a running application of the same partition); returns
    (ingress handle, whether this call deployed it). On the compiled data plane it returns
    once the plane is built; where the plane cannot be built it deploys the handle chain
    instead and says why on stderr."""
    from ray import serve

    resources = parse_resources_or_die(args.resources)
    replicas, threads = parse_counts_or_die(args)
    plane = getattr(args, "data_plane", None) or DEFAULT_DATA_PLANE
    listen = ingress_listen(args)
    opts = actor_options(partition, resources, replicas)
    if reuse:
        st = app_status(serve, name)
        if st is not None and str(getattr(st.status, "value", st.status)) == "RUNNING":
            h = serve.get_app_handle(name)
            d = _describe_running(h, name)
            if d.get("digest") == partition.digest(settings(resources, replicas, threads, plane, listen)):
                return h, False
            print(
                f"note: {name}: the running application of that name serves another partition or settings; "
                "deploying this one in its place",
                file=sys.stderr,
                flush=True,
            )
    check_resources(ray, partition, opts)
    serve.start(proxy_location="HeadOnly", http_options={"host": args.http_host, "port": args.http_port})
    t0 = time.monotonic()
    handle = _run_app(serve, args, partition, name, resources, replicas, threads, plane, args.timeout)
    why = _plane_failure(handle, max(1.0, args.timeout - (time.monotonic() - t0)))
    if why:
        print(
            f"note: {name}: {why}; serving it on the handle chain instead (--data-plane handles)",
            file=sys.stderr,
            flush=True,
        )
        serve.delete(name)
        handle = _run_app(serve, args, partition, name, resources, replicas, threads, plane, args.timeout, why)
    return handle, True


def _run_app(serve, args, partition, name, resources, replicas, threads, plane, timeout_s, compiled_failed=None):
    listen = ingress_listen(args)
    app = build_app(
        partition.path,
        resources,
        name=name,
        request_timeout_s=args.request_timeout,
        replicas=replicas,
        threads=threads,
        data_plane=plane,
        compiled_failed=compiled_failed,
        ingress_port=None if listen is None else listen["port"],
        ingress_host=args.http_host,
    )
    box = {}

    def go():
        try:
            box["handle"] = serve.run(app, name=name, route_prefix=f"/{name}")
        except Exception as e:
            box["error"] = e

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive() or "error" in box:
        why = describe_failure(serve, name)
        # Leave no half-deployed application retrying on the cluster.
        try:
            serve.delete(name, _blocking=False)
        except Exception:
            pass
        if t.is_alive():
            die(1, f"{name} did not come up within {timeout_s:g}s (removed): {why}")
        die(1, f"{name} failed to deploy (removed): {why}")
    return box["handle"]


def _plane_failure(handle, timeout_s):
    """Waits for a compiled data plane's first build; why it failed, or None (built, or the
    handle chain)."""
    end = time.monotonic() + timeout_s
    while True:
        try:
            d = handle.describe.remote().result(timeout_s=max(1.0, end - time.monotonic()))
        except Exception as e:
            return f"the ingress did not describe itself: {short_error(e)}"
        plane = d.get("data_plane") or {}
        if plane.get("kind") != "compiled" or plane.get("state") == "ready":
            return None
        if plane.get("state") == "failed":
            return f"the compiled data plane could not be built ({plane.get('last_failure')})"
        if time.monotonic() > end:
            waiting = plane.get("waiting_for")
            die(
                1,
                f"the compiled data plane did not come up within {timeout_s:g}s"
                + (f": waiting for a node with the resources of {', '.join(waiting)}" if waiting else ""),
            )
        time.sleep(0.2)


def parse_counts_or_die(args):
    """--replicas and --threads as per-backend tables."""
    try:
        return (
            parse_per_backend(getattr(args, "replicas", None), "replicas"),
            parse_per_backend(getattr(args, "threads", None), "threads"),
        )
    except ValueError as e:
        die(2, str(e))


def parse_resources_or_die(text):
    try:
        return parse_resources(text)
    except ValueError as e:
        die(2, str(e))


def describe_placement(handle, timeout_s=30):
    return handle.describe.remote().result(timeout_s=timeout_s)


def print_placement(desc):
    for p in desc["parts"]:
        if "error" in p:
            print(f"  {p['deployment']:<14} backend {p['backend']:<6} unreachable: {p['error']}")
            continue
        res = ", ".join(f"{k}={v:g}" for k, v in sorted(p["node_resources"].items()))
        head = " (head)" if p.get("is_head") else ""
        print(
            f"  {p['deployment']:<14} backend {p['backend']:<6} node {p['node_id'][:12]}{head} "
            f"{p.get('node_ip') or ''} [{res}]"
        )
    note = autogroup_note(desc)
    if note:
        print(note)


def autogroup_note(desc):
    """A line for a compiled deployment whose parts' nodes share their cores by autogroup,
    where its idle waiters cost work in other sessions; None elsewhere."""
    if (desc.get("data_plane") or {}).get("kind") != "compiled":
        return None
    parts = [p["deployment"] for p in desc["parts"] if p.get("autogroup")]
    if not parts:
        return None
    return (
        f"note: the nodes of {', '.join(parts)} share their cores between sessions first (autogroup): "
        "while this deployment idles its waiting threads spin, and Ray's session takes up to its share "
        "of the cores from work started in other sessions (docs/serving.md, 'An idle deployment and the "
        "rest of the machine')"
    )


def ingress_listen(args):
    """Where the ingress answers HTTP itself, as `--ingress-port` and `--http-host` say; None
    for off."""
    try:
        port = parse_ingress_port(getattr(args, "ingress_port", DEFAULT_INGRESS_PORT))
    except ValueError as e:
        die(2, str(e))
    return None if port is None else {"host": args.http_host, "port": port}


def ingress_route(desc):
    """The ingress's own route as described, (host, port), or None (off, stopped, or a
    loopback address on another node than this process's)."""
    http = (desc.get("ingress") or {}).get("http")
    if not http or http.get("error") or not http.get("port"):
        return None
    if is_loopback(http["host"]) and http.get("node_ip"):
        try:
            import ray

            if http["node_ip"] != ray.util.get_node_ip_address():
                return None
        except Exception:
            return None
    return http["host"], int(http["port"])


def running_http(args):
    """Where Serve's proxy really listens: options given to an already running Serve are
    ignored. Read through a private API, hence the fallback."""
    try:
        from ray.serve.context import _get_global_client

        cfg = _get_global_client().http_config
        return cfg.host, int(cfg.port)
    except Exception:
        return args.http_host, args.http_port
