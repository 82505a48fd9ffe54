"""The command line: ``serve``, ``export`` (a self-contained Ray Serve application folder),
``bench`` and ``verify``; ``main`` parses and dispatches."""

import argparse
import json
import os
import shutil
import signal
import sys
import time

from .checks import cmd_bench, cmd_verify
from .cluster import (
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
from .decoder_app import build_decoder_app, is_decoder

DECODER_FLAGS = ("max_sequences", "max_context", "max_kv_bytes")


def decoder_limits(args, partition):
    """The decoder bounds given ({keyword: value}); a partition that is no decoder takes none."""
    given = {f: getattr(args, f) for f in DECODER_FLAGS if getattr(args, f, None) is not None}
    if given and not is_decoder(partition):
        flags = ", ".join(f"--{f.replace('_', '-')}" for f in given)
        die(2, f"{flags}: only for a decoder's partition (one with state pairs); {partition.path} has none")
    return given


def cmd_serve(args):
    partition = load_partition(args.conn)
    name = args.name or partition.stem
    decoder_limits(args, partition)
    ray = connect(args.address, args.timeout)
    from ray import serve

    if is_decoder(partition):
        return serve_decoder(args, serve, partition, name)
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
    return wait_then_delete(serve, name)


def serve_decoder(args, serve, partition, name):
    """A decoder's stages, each keeping its sequences' KV caches, behind OpenAI's
    /v1/completions (streamed) and the handle's generate."""
    resources = parse_resources_or_die(args.resources)
    _, threads = parse_counts_or_die(args)
    listen = ingress_listen(args)
    try:
        app = build_decoder_app(
            partition.path,
            resources,
            name=name,
            threads=threads,
            ingress_port=None if listen is None else listen["port"],
            ingress_host=args.http_host,
            **decoder_limits(args, partition),
        )
    except ValueError as e:
        die(2, str(e))
    serve.start(proxy_location="HeadOnly", http_options={"host": args.http_host, "port": args.http_port})
    handle = serve.run(app, name=name, route_prefix=f"/{name}")
    desc = handle.describe.remote().result(timeout_s=args.timeout)
    host, port = running_http(args)
    print(f"deployed {name}: a decoder in {len(partition.parts)} stages from {partition.path}")
    print(
        f"route: http://{host}:{port}/{name}/v1/completions  "
        '(OpenAI completions; "stream": true for server-sent events)'
    )
    fast = (desc.get("http") or {}).get("address")
    if fast:
        print(f"fast route: http://{fast[0]}:{fast[1]}/v1/completions  (the same, answered by the ingress itself)")
    print(f"python: serve.get_app_handle({name!r}).options(stream=True).generate.remote([token ids], max_tokens=16)")
    for st in desc["stages"]:
        where = st.get("error") or f"{st.get('engine')} on node {str(st.get('node'))[:8]}"
        print(f"  stage {st['stage']} ({st['backend']}): {where}")
    sys.stdout.flush()
    if args.detach:
        return 0
    print("serving; Ctrl-C stops and deletes the application", flush=True)
    return wait_then_delete(serve, name)


def wait_then_delete(serve, name):
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

# A decoder's bounds per stage, as given to `export --max-sequences/--max-context/--max-kv-bytes`.
DECODER = %(decoder)r

app = build_app(os.path.join(HERE, %(conn)r), RESOURCES, name=%(name)r, replicas=REPLICAS, threads=THREADS,
                data_plane=DATA_PLANE, ingress_port=INGRESS_PORT, ingress_host=INGRESS_HOST, **DECODER)
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
    limits = decoder_limits(args, partition)
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
        if f.endswith((".py", ".json")):
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
                "decoder": limits,
            }
        )
    with open(os.path.join(out, "serve_config.yaml"), "w", encoding="utf-8") as f:
        f.write(CONFIG_YAML % {"port": args.http_port, "host": args.http_host, "name": name, "dir": out})
    print(f"wrote {out}: app.py, serve_config.yaml, ray_app/, {conn_name} and {len(partition.parts)} parts")
    print(
        f"  serve run {os.path.join(out, 'serve_config.yaml')}    # or, from {out}: serve run app:app --working-dir ."
    )
    return 0


# The flags `cleave serve` and `cleave bench --ray` share with this command line, declared once
# for both (clap reads the same file).
FLAGS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flags.json")


def port(s):
    if not s.isdigit() or int(s) > 65535:
        raise argparse.ArgumentTypeError("give a port (0-65535)")
    return int(s)


def port_or_off(s):
    if s.lower() != "off" and (not s.isdigit() or int(s) > 65535):
        raise argparse.ArgumentTypeError("give a port (0-65535; 0 for any free one) or 'off'")
    return s


def seconds(s):
    try:
        v = float(s)
    except ValueError:
        v = float("nan")
    if not (0 < v < float("inf")):
        raise argparse.ArgumentTypeError("give a number of seconds above 0")
    return v


def count(s):
    if not s.isdigit():
        raise argparse.ArgumentTypeError("give a whole number, 0 or more")
    return int(s)


_KINDS = {"text": str, "port": port, "port-or-off": port_or_off, "seconds": seconds, "count": count}


def declared_flags():
    with open(FLAGS_FILE, encoding="utf-8") as f:
        return json.load(f)


def add_flags(p, section):
    """The section's flags of flags.json on parser `p`, with their defaults."""
    for f in declared_flags()[section]:
        text = f["help"] if f.get("default") is None else f"{f['help']} (default {f['default']})"
        name = "--" + f["flag"]
        if f["kind"] == "switch":
            p.add_argument(name, action="store_true", help=text)
        elif f["kind"] == "choice":
            p.add_argument(name, choices=f["choices"], default=f.get("default"), metavar=f["value"], help=text)
        else:
            kind = _KINDS[f["kind"]]
            default = f.get("default")
            p.add_argument(
                name, type=kind, default=None if default is None else kind(default), metavar=f["value"], help=text
            )


def parser():
    """The command line's parser: `serve`, `export`, `bench` and `verify`."""
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
                "--ray",
                required=True,
                metavar="HOST:PORT",
                help="the Ray head's GCS address, as `ray start --head` printed it",
            )
            add_flags(p, "cluster")
        add_flags(p, "deploy")
        add_flags(p, "route")

    p = sub.add_parser("serve", help="deploy on a running cluster and serve until Ctrl-C")
    common(p)
    add_flags(p, "serve")
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
            p.add_argument("--warmup", type=int, default=3, metavar="N", help="untimed requests first (default 3)")
            add_flags(p, "bench")
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

    return ap


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        code = args.func(args)
    except KeyboardInterrupt:
        code = 130
    sys.stdout.flush()
    sys.stderr.flush()
    # Ray's shutdown hooks can stall on a cluster that lost a node; the work is done.
    os._exit(code)
