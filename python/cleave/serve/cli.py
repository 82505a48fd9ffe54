"""The command line: ``serve``, ``export`` (a self-contained Ray Serve application folder),
``bench`` and ``verify``; ``main`` parses and dispatches."""

import argparse
import json
import os
import shutil
import signal
import sys
import time

from .checks import VIAS, cmd_bench, cmd_verify
from .cluster import (
    DEFAULT_HTTP_PORT,
    connect,
    deploy,
    describe_placement,
    die,
    ingress_listen,
    ingress_route,
    load_partition,
    parse_counts_or_die,
    parse_resources_or_die,
    print_placement,
    running_http,
)
from .ingress import DATA_PLANES, DEFAULT_DATA_PLANE, DEFAULT_INGRESS_PORT, DEFAULT_REQUEST_TIMEOUT_S


def cmd_serve(args):
    partition = load_partition(args.conn)
    name = args.name or partition.stem
    ray = connect(args.address, args.timeout)
    from ray import serve

    handle, _ = deploy(ray, args, partition, name, reuse=False)
    desc = describe_placement(handle)
    host, port = running_http(args)
    print(f"deployed {name}: {len(partition.parts)} parts from {partition.path}")
    if (host, port) != (args.http_host, args.http_port):
        print(
            f"note: Serve was already running on this cluster with HTTP on {host}:{port}; --http-port/--http-host "
            "apply only when this command starts Serve"
        )
    print(
        f"route: http://{host}:{port}/{name}  (POST an .npz of {', '.join(partition.inputs)}; ?boundaries=1 adds the "
        "tensors between parts)"
    )
    direct = ingress_route(desc)
    if direct:
        print(
            f"fast route: http://{direct[0]}:{direct[1]}/  (the same, answered by the ingress itself: no proxy hop; "
            "its port is new each time the ingress starts unless --ingress-port fixes it)"
        )
    elif (desc.get("ingress") or {}).get("http"):
        print(f"note: the ingress's own listener is down: {desc['ingress']['http'].get('error')}")
    print(f"python: serve.get_app_handle({name!r}).infer.remote({{name: array}}, boundaries=False)")
    print_placement(desc)
    sys.stdout.flush()
    if args.detach:
        return 0
    print("serving; Ctrl-C stops and deletes the application", flush=True)

    def stop(signum, frame):
        raise KeyboardInterrupt

    # SIGTERM too (a supervisor, or cleave itself), and SIGINT even where a parent shell
    # started this in the background with SIGINT ignored.
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print(f"stopping: deleting {name}", flush=True)
        serve.delete(name)
    return 0


APP_PY = '''"""Ray Serve entry point of an exported cleave partition: `serve run app:app`, or
`serve run serve_config.yaml` / `serve deploy serve_config.yaml` from this folder.
Needs the cleave package and ray[serve] on every node (pip install 'cleave-nn[ray]'), with
ai-edge-litert for TFLite parts."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from ray_app import build_app  # noqa: E402
from ray_app.ray_token import send_token_if_asked  # noqa: E402

# `serve run app:app` imports this file before it connects: where the cluster at RAY_ADDRESS asks
# for a token and one is at hand, Ray's client is told to send it.
import ray  # noqa: E402

_said = None if ray.is_initialized() else send_token_if_asked(os.environ.get("RAY_ADDRESS", "").removeprefix("ray://"))
if _said:
    print(_said, file=sys.stderr, flush=True)

# Backend -> ray_actor_options, as given to `export --resources` (see ray_app/__init__.py);
# CLEAVE_RESOURCES in the environment replaces it.
RESOURCES = json.loads(os.environ.get("CLEAVE_RESOURCES") or %(resources)r)

# Backend -> replicas and intra-op threads, as given to `export --replicas/--threads`.
REPLICAS = %(replicas)r
THREADS = %(threads)r
# How tensors move between parts: "compiled" (a Ray Compiled Graph) or "handles".
DATA_PLANE = %(data_plane)r
# Where the ingress also answers the route itself, skipping Serve's proxy (0: any free port;
# None: off), on INGRESS_HOST of its node.
INGRESS_PORT = %(ingress_port)r
INGRESS_HOST = %(ingress_host)r

app = build_app(os.path.join(HERE, %(conn)r), RESOURCES, name=%(name)r, replicas=REPLICAS, threads=THREADS,
                data_plane=DATA_PLANE, ingress_port=INGRESS_PORT, ingress_host=INGRESS_HOST)
'''


CONFIG_YAML = """# Ray Serve config of an exported cleave partition.
#   serve run serve_config.yaml     (RAY_ADDRESS=HOST:PORT, or --address)
#   serve deploy serve_config.yaml  (through the head's dashboard, --address http://HOST:8265)
# The application is built where Serve's controller runs (the head node): this folder must
# be at working_dir's path there. The replicas need nothing from it (parts up to 64 MiB and
# the code travel with the deployment). Elsewhere, replace working_dir by the URI of a zip of
# this folder, or skip this file: `serve run app:app --working-dir .` from this folder.
proxy_location: HeadOnly
http_options:
  host: %(host)s
  port: %(port)d
applications:
  - name: %(name)s
    route_prefix: /%(name)s
    import_path: app:app
    runtime_env:
      working_dir: "local://%(dir)s"
"""


def cmd_export(args):
    partition = load_partition(args.conn)
    resources = parse_resources_or_die(args.resources)
    replicas, threads = parse_counts_or_die(args)
    listen = ingress_listen(args)
    name = args.name or partition.stem
    out = os.path.abspath(args.out_dir)
    if os.path.exists(out) and os.listdir(out) and not args.force:
        die(2, f"{out} exists and is not empty (--force writes into it)")
    os.makedirs(out, exist_ok=True)
    for p in partition.parts:
        dest = os.path.join(out, os.path.basename(p["file"]))
        shutil.copyfile(p["file"], dest)
    conn = json.loads(json.dumps(partition.raw))
    for p in conn["parts"]:
        p["file"] = os.path.basename(p["file"])
    if conn.get("source", {}).get("file") and partition.source_file:
        # Only `verify` reads the source; it stays where it is rather than doubling the folder,
        # named from the exported folder (no absolute path of this machine in the app).
        conn["source"]["file"] = os.path.relpath(partition.source_file, out)
    conn_name = os.path.basename(partition.path)
    with open(os.path.join(out, conn_name), "w", encoding="utf-8") as f:
        json.dump(conn, f, indent=2)
    # The application's package, as the app imports it (`ray_app`): its modules, no caches.
    package = os.path.dirname(os.path.abspath(__file__))
    dest = os.path.join(out, "ray_app")
    os.makedirs(dest, exist_ok=True)
    for f in sorted(os.listdir(package)):
        if f.endswith(".py"):
            shutil.copyfile(os.path.join(package, f), os.path.join(dest, f))
    with open(os.path.join(out, "app.py"), "w", encoding="utf-8") as f:
        f.write(
            APP_PY
            % {
                "resources": json.dumps(resources),
                "conn": conn_name,
                "name": name,
                "replicas": replicas,
                "threads": threads,
                "data_plane": args.data_plane,
                "ingress_port": None if listen is None else listen["port"],
                "ingress_host": args.http_host,
            }
        )
    with open(os.path.join(out, "serve_config.yaml"), "w", encoding="utf-8") as f:
        f.write(CONFIG_YAML % {"port": args.http_port, "host": args.http_host, "name": name, "dir": out})
    print(f"wrote {out}: app.py, serve_config.yaml, ray_app/, {conn_name} and {len(partition.parts)} parts")
    print(
        f"  serve run {os.path.join(out, 'serve_config.yaml')}    # or, from {out}: serve run app:app --working-dir ."
    )
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m cleave.serve",
        description="Serve a cleave partition (stem.conn.json) on a Ray cluster: its parts, placed by their "
        "backends' Ray "
        "resources, joined by a Ray Compiled Graph (or by Serve deployment handles, --data-plane handles) behind one "
        "HTTP route, a Ray Serve deployment.",
        epilog="Placement rule: cpu -> anywhere; gpu*/cuda* -> num_gpus; any other backend B -> custom resource B that "
        "nodes declare (ray start --resources='{\"B\": 1}'). Exit codes: 0 ok, 1 failed check, 2 usage or "
        "unreachable cluster.",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p, cluster=True, many=False):
        if many:
            p.add_argument(
                "conn",
                nargs="+",
                help="partitions' stem.conn.json (part files beside each), benched one after the other; give the "
                "1-stage cut of a model beside its other cuts for the cost per hop",
            )
        else:
            p.add_argument("conn", help="the partition's stem.conn.json (part files beside it)")
        if cluster:
            p.add_argument(
                "--address",
                required=True,
                metavar="HOST:PORT",
                help="the Ray head's GCS address, as `ray start --head` printed it",
            )
            p.add_argument(
                "--timeout",
                type=float,
                default=120.0,
                metavar="S",
                help="seconds to wait for the cluster and for the deployments to come up (default 120)",
            )
            p.add_argument(
                "--request-timeout",
                type=float,
                default=DEFAULT_REQUEST_TIMEOUT_S,
                metavar="S",
                help="seconds one request may take inside the application before it fails (default "
                f"{DEFAULT_REQUEST_TIMEOUT_S:g})",
            )
        p.add_argument(
            "--resources",
            metavar="JSON",
            help="backend -> ray_actor_options, replacing the placement rule, e.g. "
            '\'{"npu": {"resources": {"npu": 1}}, "gpu0": {"num_gpus": 1}}\'',
        )
        p.add_argument(
            "--replicas",
            metavar="SPEC",
            help="replicas of each part, N for all or per backend, e.g. 'cpu=2,npu=1' "
            "('*=N' for the backends not named; default 1)",
        )
        p.add_argument(
            "--threads",
            metavar="SPEC",
            help="intra-op threads of each part's engine, N or per backend as --replicas "
            "(default: the num_cpus --resources reserves for it, else its share of its node's cores: "
            "the cores divided by the deployment's part replicas)",
        )
        p.add_argument(
            "--name", help="Ray Serve application name, also the route /NAME (default: the partition's stem)"
        )
        p.add_argument(
            "--http-port",
            type=int,
            default=DEFAULT_HTTP_PORT,
            metavar="P",
            help=f"HTTP port of the route (default {DEFAULT_HTTP_PORT})",
        )
        p.add_argument(
            "--http-host",
            default="127.0.0.1",
            metavar="HOST",
            help="address Serve's HTTP proxy listens on; 0.0.0.0 for other machines (default 127.0.0.1)",
        )
        p.add_argument(
            "--data-plane",
            choices=DATA_PLANES,
            default=DEFAULT_DATA_PLANE,
            help="how tensors move between parts: 'compiled', the parts as Ray actors joined by a Ray Compiled Graph "
            "that the ingress drives (shared-memory channels on a node, no Serve request per part; the default; "
            "where a compiled graph cannot serve the partition, handles, and the reason is printed), or 'handles', "
            "one Serve deployment per part called by handle",
        )
        p.add_argument(
            "--ingress-port",
            default=str(DEFAULT_INGRESS_PORT),
            metavar="PORT",
            help="where the ingress also answers the route itself, on --http-host of its node, skipping Serve's HTTP "
            "proxy (about 10 ms less a request, and most of the gap to the machine's throughput on 2 cores): a port, "
            "0 for any free one, new each time the ingress starts (the default; `serve` prints it, `describe` gives "
            "it), or 'off'",
        )

    p = sub.add_parser("serve", help="deploy on a running cluster and serve until Ctrl-C")
    common(p)
    p.add_argument("--detach", action="store_true", help="return once deployed, leaving the application running")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("export", help="write a self-contained Ray Serve application folder (serve run / serve deploy)")
    common(p, cluster=False)
    p.add_argument("out_dir", metavar="OUT_DIR")
    p.add_argument("--force", action="store_true", help="write into a non-empty OUT_DIR")
    p.set_defaults(func=cmd_export)

    for cmd, text in (
        (
            "bench",
            "time requests at several levels in flight, against the whole model's best throughput on this "
            "machine's cores",
        ),
        ("verify", "compare outputs and every boundary tensor with the source model run whole"),
    ):
        p = sub.add_parser(cmd, help=text)
        common(p, many=cmd == "bench")
        p.add_argument("--json", action="store_true", help="print the result as JSON")
        p.add_argument("--keep", action="store_true", help="leave the application running if this command deployed it")
        if cmd == "bench":
            p.add_argument(
                "--requests", type=int, default=50, metavar="N", help="requests per in-flight level (default 50)"
            )
            p.add_argument(
                "--in-flight",
                default="1,2,4,8,16",
                metavar="LIST",
                help="comma-separated in-flight levels (default 1,2,4,8,16)",
            )
            p.add_argument("--warmup", type=int, default=3, metavar="N", help="untimed requests first (default 3)")
            p.add_argument(
                "--via",
                choices=VIAS,
                default="http",
                help="send the requests as HTTP POSTs of an .npz, as clients do, to the ingress's own listener "
                "('http', the default; Serve's route where --ingress-port is off) or through Serve's HTTP proxy "
                "('proxy'), or through the Python handle ('handle')",
            )
            p.add_argument(
                "--cores",
                type=int,
                default=os.cpu_count() or 1,
                metavar="N",
                help="cores the limit is measured on: the whole source model's best throughput on this machine, "
                "after the benchmark (default: all of them; 0 skips it)",
            )
            p.set_defaults(func=cmd_bench)
        else:
            p.add_argument("--seed", type=int, default=0, help="seed of the random input (default 0)")
            p.add_argument(
                "--tol",
                type=float,
                default=1e-3,
                help="largest relative L2 error of a float tensor (default 1e-3, as cleave verify)",
            )
            p.add_argument(
                "--rtol",
                type=float,
                help="compare element by element instead: |a-b| <= atol + rtol*|b| (rtol default 1e-4)",
            )
            p.add_argument("--atol", type=float, help="absolute part of the element-wise check (default 1e-5)")
            p.set_defaults(func=cmd_verify)

    args = ap.parse_args(argv)
    try:
        code = args.func(args)
    except KeyboardInterrupt:
        code = 130
    sys.stdout.flush()
    sys.stderr.flush()
    # Ray's shutdown hooks can stall on a cluster that lost a node; the work is done.
    os._exit(code)
