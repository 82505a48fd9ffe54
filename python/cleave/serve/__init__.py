r"""Serve a cleave partition (a stem.conn.json and its part files) on a Ray cluster.

An ``ingress`` Ray Serve deployment (the HTTP route and the handle) drives the parts over one
of two data planes (``--data-plane``, ``build_app(..., data_plane=)``):

* ``compiled`` (default): the parts are Ray actors (``PartWorker``, one per part and lane),
  joined by a Ray Compiled Graph that the ingress builds from the partition's DAG and
  executes; tensors go part to part over Ray's shared-memory channels (its transport between
  nodes), never through the ingress unless asked for, with no Serve request per part. When an
  actor or its node dies the ingress tears the graph down and builds it again once the
  actors' resources are back (``describe``'s ``data_plane``). Ray's channel reads spin while
  they wait; the threads that wait on them wait at SCHED_IDLE between requests
  (``compiled.WAIT_AS_IDLE``, ``WAIT_QUIET_S``).
* ``handles``: one Ray Serve deployment per part (``part1_cpu``, ``part2_npu``, ...); each
  part's call carries the graph inputs it reads and the DeploymentResponses of the parts it
  reads from, so Ray Serve starts it once those have answered and moves their tensors to it
  worker to worker. Also used where a compiled graph cannot serve the partition (replica
  counts that differ between parts), with the reason in ``describe``.

On both, parts that do not depend on each other run at once, and with several requests in
flight different parts work on different requests at the same time (a pipeline).

Engines: every part runs on cleave's own runtime through the installed package's extension
(``cleave._cleave.open_part``), with the engines, registry and errors of ``cleave run``: the
engine the conn.json records (``openvino:DEVICE``), else the one its backend names, else the first
of its format's engines that loads it: ONNX Runtime, then tract, for ONNX; LiteRT for TFLite; onert
for circle (``cleave serve`` converts circle parts to TFLite for LiteRT where the onert package is
missing). ``describe`` gives each part's engine as it was opened, and a ``note`` where it is not
the first choice or where a ``gpu*``/``cuda*`` backend runs on the CPU. Every node needs the
cleave package: ``pip install 'cleave-nn[ray]'``.

Replicas and threads: ``--replicas`` and ``--threads`` (``build_app(..., replicas=, threads=)``)
take ``N`` for every part or ``BACKEND=N,...`` (``*=N`` for the backends not named): each
part's replica count (default 1; Serve spreads requests over them) and its engine's intra-op
threads (default: the ``num_cpus`` its options reserve, else its share of its node's cores: the
cores divided by the deployment's part replicas, all of them for one part). Each replica runs one
request at a time, as a device does.

This package is ``cleave.serve`` in the Python package (``from cleave.serve import build_app``)
and needs only the standard library, numpy, Ray and the cleave package's extension: the cleave
binary carries these same files inside it for ``cleave serve`` (as the package ``ray_app``), and
``export`` copies them into the application folder it writes. Its modules, one concern each:
``partition`` (the conn.json as served), ``actors`` (actor options, replicas, threads),
``runtime`` (parts on cleave's runtime), ``wire`` (the .npz request and reply),
``handles`` and ``compiled`` (the two data planes), ``ingress`` (the route and ``build_app``),
``listener`` (the ingress's own HTTP port),
``cluster``, ``checks`` and ``cli`` (the command line).

Placement: a part's backend (its device name in the conn.json) becomes Ray actor options
-------------------------------------------------------------------------------------------
* ``cpu``                 -> nothing asked: any node.
* ``gpu*`` / ``cuda*``    -> ``{"num_gpus": 1/k}``, k the number of parts on that backend,
                             so the parts of one GPU backend share one GPU.
* any other name B        -> ``{"resources": {B: 0.01}}``: a custom resource that the nodes
                             owning that device declare, e.g. ``ray start --resources='{"npu": 1}'``.
                             The small amount makes it a placement tag rather than a quota:
                             up to 100 parts (of any number of applications) share one unit.
* ``num_cpus`` is 0 unless given: placement is the device's business, and a part's engine
  runs on one thread unless told otherwise.
``--resources JSON`` (or ``build_app(conn, resources)``) maps backend names to whole
``ray_actor_options`` fragments that replace the rule above, e.g.
``'{"npu": {"resources": {"npu": 1}}, "gpu0": {"num_gpus": 1}, "cpu": {}}'``; the key ``"*"``
replaces the rule for every backend not listed, and ``"ingress"`` the ingress's own options
(by default it asks for a sliver of the head node, ``node:__internal_head__``, so it lives
beside Serve's controller rather than on a device node that may go away).

Parts up to 64 MiB travel inside the deployment's arguments, so nodes need no shared
filesystem; larger ones are opened by path on the node, which must then see the same path
(a shared filesystem, or the exported folder used as the runtime_env working_dir).

HTTP
----
``POST http://HOST:PORT/NAME`` with an .npz body holding the graph inputs by name answers an
.npz of the graph outputs; ``?boundaries=1`` adds every part's outputs (the tensors crossing
between parts). The header ``x-cleave-parts`` carries, as JSON, each part's deployment, backend
and compute time (``compute_s``; on the compiled plane also ``cpu_s``, its thread's CPU time,
and, where it ran on the ingress's node, ``in_s``, the time its inputs took to reach it, and for
a part only the ingress reads ``out_s``, the time its results took to reach the ingress),
never which node ran it: that is ``describe``, on the handle. Bad input
answers 400 with the reason (not an .npz, a missing input, a dtype or shape the model does not
take, a negative dim); a request past a limit answers 413, 408, 429 or 503 naming the limit's
variable (a body many times larger than the inputs declare or, where a dim is dynamic, than
CLEAVE_MAX_BODY_BYTES, 1 GiB by default; an archive's entries, its compression ratio, the bytes
all requests in flight hold, a body too slow, a client's bodies arriving at once: docs/serving.md,
Limits); a part that fails or does not answer in time answers 503. A request that runs out of
time is stopped at its part (queued, it never runs; running, ONNX Runtime terminates it), so it
does not hold the part's one worker.
The ingress answers the same requests on a port of its own too (``--ingress-port``,
``build_app(..., ingress_port=)``; 0, the default, for any free one; ``describe()["ingress"]
["http"]`` says where): no hop through Serve's HTTP proxy, about 10 ms less a request.
    python3 -c 'import numpy as np, io, sys; b=io.BytesIO(); \
      np.savez(b, **{"gpu_0/data_0": np.zeros((1,3,224,224), np.float32)}); \
      sys.stdout.buffer.write(b.getvalue())' > in.npz
    curl -s --data-binary @in.npz 'http://127.0.0.1:8000/light_resnet50?boundaries=1' > out.npz

Python (DeploymentHandle)
-------------------------
    import ray
    from ray import serve
    ray.init(address="HOST:PORT")
    h = serve.get_app_handle("light_resnet50")
    r = h.infer.remote({"gpu_0/data_0": x}, boundaries=True).result(timeout_s=60)
    r["outputs"]     # {name: ndarray}, the graph outputs
    r["boundaries"]  # {name: ndarray}, every part's outputs (only with boundaries=True)
    r["parts"]       # [{"deployment", "backend", "node_id", "compute_s"[, "cpu_s", "in_s", "out_s"]}, ...]
    h.describe.remote().result()  # each part's node id and that node's resources
Inside another deployment, ``await h.infer.remote(...)`` instead of ``.result()``.

Command line (``python -m cleave.serve SUBCOMMAND --help`` for every option)
--------------------------------------------------------------------------
    serve  CONN.json --address HOST:PORT [--resources JSON] [--replicas SPEC] [--threads SPEC]
           [--http-port P] [--http-host H] [--ingress-port P|off] [--name NAME] [--detach]
    export CONN.json OUT_DIR [--resources JSON] [--name NAME] [--http-port P] [--http-host H]
    bench  CONN.json [MORE.conn.json ...] --address HOST:PORT [--requests N]
           [--in-flight 1,2,4,8,16] [--via http|proxy|handle] [--cores N] [--json]
    verify CONN.json --address HOST:PORT [--seed S] [--tol T | --rtol R --atol A] [--json]
Exit codes: 0 success, 1 a failed check (verify mismatch, a deployment that did not come
up, a failed request), 2 bad usage or a cluster that cannot be reached.
"""

import os

# Set before Ray is imported anywhere in this process: Ray otherwise reports usage to its
# makers, and warns about container CPU limits on every start.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DISABLE_DOCKER_CPU_WARNING", "1")

from .actors import (  # noqa: E402
    actor_options,
    default_threads,
    parse_per_backend,
    parse_resources,
    per_backend_value,
)
from .checks import random_feeds, reference_run  # noqa: E402
from .cli import main  # noqa: E402
from .compiled import CompiledPlane, PartWorker, compiled_plane_refusal  # noqa: E402
from .completions import Completions  # noqa: E402
from .decoder_app import DecoderIngress, StageWorker, build_decoder_app, is_decoder  # noqa: E402
from .generation import Decoder, Generation, LocalStage, StageLost  # noqa: E402
from .handles import PartReplica  # noqa: E402
from .ingress import DATA_PLANES, Ingress, build_app  # noqa: E402
from .listener import Listener, parse_ingress_port  # noqa: E402
from .partition import Partition, ingress_meta, part_specs  # noqa: E402
from .runtime import open_part  # noqa: E402
from .wire import MAX_BODY_BYTES, body_limit, check_input, read_npz, short_error, write_npz  # noqa: E402

__all__ = [
    "DATA_PLANES",
    "MAX_BODY_BYTES",
    "CompiledPlane",
    "Completions",
    "Decoder",
    "DecoderIngress",
    "Generation",
    "Ingress",
    "Listener",
    "PartReplica",
    "LocalStage",
    "PartWorker",
    "Partition",
    "StageLost",
    "StageWorker",
    "actor_options",
    "body_limit",
    "build_app",
    "build_decoder_app",
    "check_input",
    "compiled_plane_refusal",
    "default_threads",
    "ingress_meta",
    "is_decoder",
    "main",
    "open_part",
    "parse_ingress_port",
    "parse_per_backend",
    "parse_resources",
    "part_specs",
    "per_backend_value",
    "random_feeds",
    "read_npz",
    "reference_run",
    "short_error",
    "write_npz",
]
