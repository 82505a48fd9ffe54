#!/usr/bin/env python3
"""Serve a cleave partition (a stem.conn.json and its part files) on a Ray cluster.

An ``ingress`` Ray Serve deployment (the HTTP route and the handle) drives the parts over one
of two data planes (``--data-plane``, ``build_app(..., data_plane=)``):

* ``compiled``: the parts are Ray actors (``PartWorker``, one per part and lane),
  joined by a Ray Compiled Graph that the ingress builds from the partition's DAG and
  executes; tensors go part to part over Ray's shared-memory channels (its transport between
  nodes), never through the ingress unless asked for, with no Serve request per part. When an
  actor or its node dies the ingress tears the graph down and builds it again once the
  actors' resources are back (``describe``'s ``data_plane``).
* ``handles`` (default): one Ray Serve deployment per part (``part1_cpu``, ``part2_npu``, ...); each
  part's call carries the graph inputs it reads and the DeploymentResponses of the parts it
  reads from, so Ray Serve starts it once those have answered and moves their tensors to it
  worker to worker. Also used where a compiled graph cannot serve the partition (replica
  counts that differ between parts), with the reason in ``describe``.

On both, parts that do not depend on each other run at once, and with several requests in
flight different parts work on different requests at the same time (a pipeline).

Engines: an ONNX part runs on ONNX Runtime, with the CUDA execution provider when its backend
is named ``gpu*``/``cuda*`` and the installed onnxruntime has it (else the CPU, and ``describe``
says so); a TFLite part runs on LiteRT (``ai-edge-litert``); a part whose conn.json entry records
``"engine" : "openvino:DEVICE"`` runs on OpenVINO's DEVICE; a circle part runs on onert
(``pip install onert``, ONE's runtime, on its cpu backend; ``cleave serve`` converts circle
parts to TFLite for LiteRT where the onert package is missing). ``describe`` gives each part's
engine as it was opened.

Replicas and threads: ``--replicas`` and ``--threads`` (``build_app(..., replicas=, threads=)``)
take ``N`` for every part or ``BACKEND=N,...`` (``*=N`` for the backends not named): each
part's replica count (default 1; Serve spreads requests over them) and its engine's intra-op
threads (default: the ``num_cpus`` its options reserve, else 1). Each replica runs one request
at a time, as a device does.

This module is ``cleave.serve`` in the Python package (``from cleave.serve import build_app``)
and stands alone (only the standard library, numpy, Ray and the parts' engines): the cleave binary
carries this same file inside it for ``cleave serve``, and copies it into exported application
folders.

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
and compute time (never which node ran it: that is ``describe``, on the handle). Bad input answers 400 with the reason (not an .npz, a missing input, a dtype or shape the
model does not take, a body many times larger than the inputs declare or, where a dim is
dynamic, than CLEAVE_MAX_BODY_BYTES, 1 GiB by default); a part that fails or does not answer in
time answers 503. A request that runs out of time is stopped at its part (queued, it never
runs; running, ONNX Runtime terminates it), so it does not hold the part's one worker.
    python3 -c 'import numpy as np, io, sys; b=io.BytesIO(); \\
      np.savez(b, **{"gpu_0/data_0": np.zeros((1,3,224,224), np.float32)}); \\
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
    r["parts"]       # [{"deployment", "backend", "node_id", "compute_s"}, ...]
    h.describe.remote().result()  # each part's node id and that node's resources
Inside another deployment, ``await h.infer.remote(...)`` instead of ``.result()``.

Command line (``python -m cleave.serve SUBCOMMAND --help`` for every option)
-------------------------------------------------------------------------
    serve  CONN.json --address HOST:PORT [--resources JSON] [--replicas SPEC] [--threads SPEC]
           [--http-port P] [--name NAME] [--detach]
    export CONN.json OUT_DIR [--resources JSON] [--name NAME] [--http-port P]
    bench  CONN.json --address HOST:PORT [--requests N] [--in-flight 1,8] [--json]
    verify CONN.json --address HOST:PORT [--seed S] [--tol T | --rtol R --atol A] [--json]
Exit codes: 0 success, 1 a failed check (verify mismatch, a deployment that did not come
up, a failed request), 2 bad usage or a cluster that cannot be reached.
"""

import argparse
import asyncio
import concurrent.futures
import hashlib
import io
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time

# Set before Ray is imported anywhere in this process: Ray otherwise reports usage to its
# makers, and warns about container CPU limits on every start.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DISABLE_DOCKER_CPU_WARNING", "1")

INLINE_MAX_BYTES = 64 << 20
CUSTOM_RESOURCE_AMOUNT = 0.01
DEFAULT_HTTP_PORT = 8000
DEFAULT_REQUEST_TIMEOUT_S = 30.0
PART_MAX_ONGOING = 16
# The largest request body, and the most bytes its inputs may unpack to.
MAX_BODY_BYTES = int(os.environ.get("CLEAVE_MAX_BODY_BYTES", str(1 << 30)))
INGRESS_MAX_ONGOING = 64
# The part formats an engine here serves (circle on onert, when its package is installed).
SERVED_FORMATS = ("onnx", "tflite", "circle")


# ----------------------------------------------------------------------------------------
# The partition
# ----------------------------------------------------------------------------------------


class Partition:
    """A conn.json read, its paths made absolute."""

    def __init__(self, conn_path):
        self.path = os.path.abspath(conn_path)
        self.dir = os.path.dirname(self.path)
        with open(self.path, encoding="utf-8") as f:
            raw = json.load(f)
        self.raw = raw
        src = raw.get("source") or {}
        self.source_file = os.path.normpath(os.path.join(self.dir, src["file"])) if src.get("file") else None
        self.inputs = list(src.get("inputs") or [])
        self.outputs = list(src.get("outputs") or [])
        self.parts = []
        seen = set(self.inputs)
        for i, p in enumerate(raw.get("parts") or []):
            missing = [t for t in p["inputs"] if t not in seen]
            if missing:
                raise ValueError(f"{self.path}: part {i + 1} reads {missing[0]!r}, which neither a graph input nor an earlier part gives")
            seen.update(p["outputs"])
            backend = p.get("backend") or "cpu"
            fmt = part_format(p)
            if fmt not in SERVED_FORMATS:
                raise ValueError(f"{self.path}: part {i + 1} ({p['file']}) is a {fmt or 'unknown-format'} part, and no engine "
                                 f"here serves it (LiteRT reads TFLite, onert circle, ONNX Runtime and OpenVINO ONNX)")
            self.parts.append({
                "index": i + 1,
                "file": os.path.join(self.dir, p["file"]),
                "inputs": list(p["inputs"]),
                "outputs": list(p["outputs"]),
                "backend": backend,
                "deployment": f"part{i + 1}_{_safe(backend)}",
                # What conn.json records the part is for (`openvino:CPU` for `ov-CPU`).
                "engine": p.get("engine"),
                "format": fmt,
            })
        if not self.parts:
            raise ValueError(f"{self.path}: lists no parts")
        if not self.inputs:
            self.inputs = list(self.parts[0]["inputs"])
        if not self.outputs:
            self.outputs = list(self.parts[-1]["outputs"])
        bad = [t for t in self.outputs if t not in seen]
        if bad:
            raise ValueError(f"{self.path}: graph output {bad[0]!r} is produced by no part")

    @property
    def stem(self):
        name = os.path.basename(self.path)
        return name[: -len(".conn.json")] if name.endswith(".conn.json") else os.path.splitext(name)[0]

    def digest(self, settings=None):
        """Identifies the partition and how it is deployed (`settings`), so a running
        application can be told apart from another."""
        h = hashlib.sha256()
        h.update(json.dumps([self.raw.get("parts"), settings], sort_keys=True).encode())
        for p in self.parts:
            with open(p["file"], "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
        return h.hexdigest()[:16]


def settings(resources, replicas, threads, data_plane="handles"):
    """What, besides the partition, makes one deployment of it differ from another."""
    return {"resources": resources or {}, "replicas": replicas or {}, "threads": threads or {}, "data_plane": data_plane}


def _safe(name):
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in name)


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
            raise ValueError(f"--{what} {text!r}: {value.strip()!r} is not a whole number (give N, or BACKEND=N,BACKEND=N)") from None
        if n < 1 or not key:
            raise ValueError(f"--{what} {text!r}: {item!r} needs a backend name and a count of at least 1")
        table[key] = n
    return table


def per_backend_value(table, backend, default):
    table = table or {}
    return table.get(backend, table.get("*", default))


def default_threads(opts):
    """Intra-op threads of a part: the CPUs its actor reserves (``num_cpus`` given through
    --resources), else one, as parts on one node share its cores."""
    n = opts.get("num_cpus") or 0
    return max(1, int(n))


def parse_resources(text):
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"--resources is not JSON: {e}") from None
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise ValueError('--resources must map backend names to ray_actor_options objects, e.g. \'{"npu": {"resources": {"npu": 1}}}\'')
    return value


# ----------------------------------------------------------------------------------------
# Deployments (plain classes here, made deployments in build_app, so that importing this
# file needs no Ray: `export` runs without it)
# ----------------------------------------------------------------------------------------


def _node_report():
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    report = {"node_id": node_id, "node_ip": None, "node_resources": {}, "is_head": False, "pid": os.getpid()}
    try:
        for n in ray.nodes():
            if n.get("NodeID") == node_id:
                res = dict(n.get("Resources") or {})
                report["node_ip"] = n.get("NodeManagerAddress")
                report["is_head"] = "node:__internal_head__" in res
                # Drop Ray's bookkeeping entries: only what a user declared says where a part belongs.
                report["node_resources"] = {k: v for k, v in res.items() if not k.startswith("node:") and k not in ("memory", "object_store_memory")}
                break
    except Exception:  # the report is informative; a GCS hiccup must not fail the replica
        pass
    return report


# ONNX Runtime's type names of the tensors numpy can hold.
_ORT_DTYPES = {
    "tensor(float)": "float32", "tensor(double)": "float64", "tensor(float16)": "float16",
    "tensor(int8)": "int8", "tensor(int16)": "int16", "tensor(int32)": "int32", "tensor(int64)": "int64",
    "tensor(uint8)": "uint8", "tensor(uint16)": "uint16", "tensor(uint32)": "uint32", "tensor(uint64)": "uint64",
    "tensor(bool)": "bool",
}


def part_format(record):
    """The format of a conn.json part: what the writer recorded, else its file's extension."""
    fmt = record.get("format")
    if fmt:
        return str(fmt).lower()
    return os.path.splitext(record["file"])[1].lower().lstrip(".")


class _Cancel:
    """RunOptions for an engine without ONNX Runtime's: setting ``terminate`` cancels the
    running request where the engine can (OpenVINO), and is a no-op where it cannot (LiteRT)."""

    def __init__(self):
        self.request = None

    def __setattr__(self, name, value):
        if name == "terminate" and value and self.request is not None:
            self.request.cancel()
        object.__setattr__(self, name, value)


class _OrtPart:
    """An ONNX part in ONNX Runtime, on the execution provider its backend calls for: CUDA for
    a ``gpu*``/``cuda*`` backend when this onnxruntime has it, the CPU otherwise (and ``note``
    says why)."""

    def __init__(self, source, backend, threads):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        providers = ["CPUExecutionProvider"]
        self.note = None
        if backend.lower().startswith(("gpu", "cuda")):
            if "CUDAExecutionProvider" in ort.get_available_providers():
                providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
            else:
                self.note = (f"backend {backend} asks for a GPU, and this onnxruntime has no CUDAExecutionProvider "
                             "(pip install onnxruntime-gpu): it runs on the CPU")
        self.session = ort.InferenceSession(source, so, providers=providers)
        self.engine = f"onnxruntime:{self.session.get_providers()[0]}"

    def input_specs(self):
        return {
            i.name: [_ORT_DTYPES.get(i.type), [d if isinstance(d, int) and d >= 0 else None for d in (i.shape or [])]]
            for i in self.session.get_inputs()
        }

    def run_options(self):
        import onnxruntime as ort

        return ort.RunOptions()

    def run(self, outputs, feeds, run_options):
        return self.session.run(outputs, feeds, run_options)


class _LiteRtPart:
    """A TFLite part in LiteRT's interpreter. LiteRT's Python interpreter cannot stop a running
    invoke: a request given up on is dropped while queued, and finishes if it has started.
    With ``keep_all``, every intermediate tensor stays readable after a run (``tensor``)."""

    def __init__(self, source, threads, keep_all=False):
        import warnings

        from ai_edge_litert.interpreter import Interpreter

        where = {"model_content": source} if isinstance(source, bytes) else {"model_path": source}
        with warnings.catch_warnings():
            # keep_all warns that keeping every tensor costs memory: that is what it is for.
            warnings.simplefilter("ignore")
            self.interp = Interpreter(**where, num_threads=threads, experimental_preserve_all_tensors=keep_all)
        self.interp.allocate_tensors()
        self.engine = f"litert:cpu:{threads}-thread"
        self.note = None
        self._details()

    def _details(self):
        self.inputs = {d["name"]: d for d in self.interp.get_input_details()}
        self.outputs = {d["name"]: d for d in self.interp.get_output_details()}

    def input_specs(self):
        import numpy as np

        specs = {}
        for name, d in self.inputs.items():
            # shape_signature keeps -1 where a dim is free; older files lack it.
            dims = d.get("shape_signature")
            dims = d["shape"] if dims is None or len(dims) == 0 else dims
            specs[name] = [np.dtype(d["dtype"]).name, [int(x) if x >= 0 else None for x in dims]]
        return specs

    def run_options(self):
        return _Cancel()

    def invoke(self, feeds):
        """One run on `feeds`, the inputs resized first where their shapes changed."""
        import numpy as np

        resized = False
        for name, d in self.inputs.items():
            shape = tuple(np.shape(feeds[name]))
            if shape != tuple(d["shape"]):
                self.interp.resize_tensor_input(d["index"], shape)
                resized = True
        if resized:
            self.interp.allocate_tensors()
            self._details()
        for name, d in self.inputs.items():
            self.interp.set_tensor(d["index"], np.ascontiguousarray(feeds[name], dtype=d["dtype"]))
        self.interp.invoke()

    def run(self, outputs, feeds, run_options):
        self.invoke(feeds)
        # get_tensor copies: the next invoke overwrites the interpreter's buffers.
        return [self.interp.get_tensor(self.outputs[n]["index"]) for n in outputs]

    def tensors(self, names):
        """Tensors by name after a run (the first of a repeated name); None when one is
        missing."""
        index = {}
        for d in self.interp.get_tensor_details():
            index.setdefault(d["name"], d["index"])
        if any(n not in index for n in names):
            return None
        return {n: self.interp.get_tensor(index[n]) for n in names}


class _OpenVinoPart:
    """A part compiled by OpenVINO for one of its devices, run as ONNX Runtime's session is:
    ``run(outputs, feeds, run_options)``, where cancelling ``run_options`` stops the request."""

    def __init__(self, source, device, threads):
        import io

        import openvino as ov

        core = ov.Core()
        model = core.read_model(io.BytesIO(source) if isinstance(source, bytes) else source)
        # Full precision, as cleave's own OpenVINO engine.
        config = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}
        if "INFERENCE_NUM_THREADS" in core.get_property(device, "SUPPORTED_PROPERTIES"):
            config["INFERENCE_NUM_THREADS"] = threads
        self.compiled = core.compile_model(model, device, config)
        self.request = self.compiled.create_infer_request()
        self.engine = f"openvino:{device}"
        self.note = None

    def input_specs(self):
        specs = {}
        for i in self.compiled.inputs:
            try:
                dtype = i.get_element_type().to_dtype().name
            except Exception:  # an OpenVINO type numpy lacks
                dtype = None
            dims = [d.get_length() if d.is_static else None for d in i.get_partial_shape()]
            specs[i.get_any_name()] = [dtype, dims]
        return specs

    def run_options(self):
        return _Cancel()

    def run(self, outputs, feeds, run_options):
        run_options.request = self.request
        result = self.request.infer(feeds)
        by_name = {}
        for port, value in result.items():
            for n in port.get_names():
                by_name[n] = value
        return [by_name[n] for n in outputs]


def circle_io_names(data):
    """The names of the main subgraph's input and output tensors of a circle or TFLite file
    (both schemas give Model.subgraphs, SubGraph.tensors/inputs/outputs and Tensor.name the
    same field ids), read from the flatbuffer directly: onert's Python API knows tensors by
    position only, and no flatbuffers package need be installed for this."""
    import struct

    def u32(at):
        return struct.unpack_from("<I", data, at)[0]

    def field(table, k):
        """Where field `k` of the table at `table` is, or None when absent."""
        vtable = table - struct.unpack_from("<i", data, table)[0]
        if 4 + 2 * k >= struct.unpack_from("<H", data, vtable)[0]:
            return None
        off = struct.unpack_from("<H", data, vtable + 4 + 2 * k)[0]
        return table + off if off else None

    def vector(at):
        """(first element, length) of the vector referenced at `at`; empty when absent."""
        if at is None:
            return 0, 0
        v = at + u32(at)
        return v + 4, u32(v)

    first, n = vector(field(u32(0), 2))  # Model.subgraphs
    if n == 0:
        raise ValueError("the model has no subgraph")
    graph = first + u32(first)
    tensors, n_tensors = vector(field(graph, 0))  # SubGraph.tensors

    def names(k):  # SubGraph.inputs (1) or .outputs (2): tensor indices
        start, count = vector(field(graph, k))
        out = []
        for j in range(count):
            i = struct.unpack_from("<i", data, start + 4 * j)[0]
            if not 0 <= i < n_tensors:
                raise ValueError(f"tensor index {i} is out of range")
            t = tensors + 4 * i
            t += u32(t)
            at = field(t, 3)  # Tensor.name
            if at is None:
                out.append("")
                continue
            s = at + u32(at)
            out.append(bytes(data[s + 4 : s + 4 + u32(s)]).decode("utf-8", "replace"))
        return out

    return names(1), names(2)


class _OnertPart:
    """A circle part on onert (Samsung ONE's runtime), through the onert package's native
    session, fed and read by position in the file's order of its inputs and outputs. onert
    cannot stop a started run: a request given up on finishes, unawaited."""

    def __init__(self, source, backends="cpu"):
        import numpy as np
        from onert.native.libnnfw_api_pybind import infer, prepare_config

        if isinstance(source, bytes):
            data = source
            # onert loads from a file only, and picks its reader by the extension.
            self._dir = tempfile.TemporaryDirectory(prefix="cleave-onert-")
            path = os.path.join(self._dir.name, "part.circle")
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(data)
        else:
            path = source
            with open(path, "rb") as f:
                data = f.read()
        self.input_names, self.output_names = circle_io_names(data)
        self.session = infer.nnfw_session(path, backends)
        n_in, n_out = self.session.input_size(), self.session.output_size()
        if (n_in, n_out) != (len(self.input_names), len(self.output_names)):
            raise ValueError(f"onert sees {n_in} inputs and {n_out} outputs, the file's main subgraph has "
                             f"{len(self.input_names)} and {len(self.output_names)}")
        self.in_info = [self.session.input_tensorinfo(i) for i in range(n_in)]
        self.dtypes = [np.dtype(info.dtype) for info in self.in_info]
        # Outputs in buffers onert allocates (their shapes may change with the inputs').
        self.session.set_prepare_config(prepare_config.ENABLE_INTERNAL_OUTPUT_ALLOC)
        self.session.prepare()
        self.shapes = [tuple(info.dims[: info.rank]) for info in self.in_info]
        self.engine = f"onert:{backends}"
        self.note = None

    def input_specs(self):
        return {name: [dt.name, list(shape)] for name, dt, shape in zip(self.input_names, self.dtypes, self.shapes)}

    def run_options(self):
        return _Cancel()

    def run(self, outputs, feeds, run_options):
        import numpy as np

        for i, name in enumerate(self.input_names):
            a = np.ascontiguousarray(feeds[name], dtype=self.dtypes[i])
            if a.shape != self.shapes[i]:
                info = self.in_info[i]
                info.rank = a.ndim
                info.dims = list(a.shape)
                self.session.set_input_tensorinfo(i, info)
                self.shapes[i] = a.shape
            self.session.set_input(i, a)
        self.session.run()
        index = {n: i for i, n in enumerate(self.output_names)}
        # Copies: the next run overwrites onert's buffers.
        return [np.array(self.session.get_output(index[n]), copy=True) for n in outputs]


def open_part(spec, source):
    """The engine session of a part: OpenVINO where conn.json records ``openvino:DEVICE``,
    LiteRT for a TFLite part, onert for a circle part, ONNX Runtime for an ONNX part."""
    threads = int(spec.get("threads") or 1)
    engine = spec.get("engine") or ""
    fmt = spec.get("format") or "onnx"
    if engine.startswith("openvino"):
        return _OpenVinoPart(source, engine.split(":", 1)[1] if ":" in engine else "CPU", threads)
    if fmt == "tflite":
        return _LiteRtPart(source, threads)
    if fmt == "circle":
        try:
            import onert  # noqa: F401
        except ImportError:
            raise ValueError(f"{spec['deployment']}: a circle part, and this Python has no onert package to run it: "
                             "pip install onert (or serve it with `cleave serve`, which converts it to TFLite)") from None
        return _OnertPart(source, engine.split(":", 1)[1] if engine.startswith("onert:") else "cpu")
    if fmt == "onnx":
        return _OrtPart(source, spec["backend"], threads)
    raise ValueError(f"{spec['deployment']}: no engine serves {fmt} parts (ONNX Runtime and OpenVINO take ONNX, LiteRT takes TFLite, onert circle)")


class PartReplica:
    def __init__(self, spec, model_bytes, actor_opts):
        self.spec = spec
        self.session = open_part(spec, model_bytes if model_bytes is not None else spec["file"])
        # What each input takes: numpy dtype name (None when numpy has no such type) and dims,
        # None where dynamic. The ingress checks requests against it before anything runs.
        self.input_specs = self.session.input_specs()
        self.engine = self.session.engine
        self.outputs = list(spec["outputs"])
        # One computation at a time per replica, as on one device; queued requests wait here
        # while the event loop stays free to accept more and to answer health checks.
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self.report = _node_report()
        self.report.update(deployment=spec["deployment"], backend=spec["backend"], engine=self.engine,
                           threads=int(spec.get("threads") or 1), actor_options=actor_opts)
        if self.session.note:
            self.report["note"] = self.session.note

    def _run(self, feeds, run_options):
        t = time.perf_counter()
        values = self.session.run(self.outputs, feeds, run_options)
        return dict(zip(self.outputs, values)), time.perf_counter() - t

    async def __call__(self, feeds, budget_s=None, *upstream):
        """Runs the part on `feeds` plus what it reads of the `upstream` parts' results (Ray
        Serve hands another part's DeploymentResponse over resolved, worker to worker, without
        the ingress in between), given up after `budget_s` seconds (what is left of the
        request's time) or when the caller cancels: a request still queued never runs, and
        one running is stopped by ONNX Runtime (RunOptions.terminate), so the part's one
        worker is free for the next request instead of finishing work nobody waits for
        (LiteRT cannot stop a started run: there the run finishes, unawaited).

        Returns its outputs, and the report of every part the result went through (its own
        last), so the ingress learns each part's node and compute time from the last parts."""
        feeds = dict(feeds)
        reports = {}
        for r in upstream:
            reports.update(r["parts"])
            for name, value in r["outputs"].items():
                if name in self.spec["inputs"]:
                    feeds.setdefault(name, value)
        missing = [n for n in self.spec["inputs"] if n not in feeds]
        if missing:
            raise RuntimeError(f"{self.spec['deployment']} (backend {self.spec['backend']}) was not given {missing[0]!r}")
        run_options = self.session.run_options()
        work = asyncio.get_running_loop().run_in_executor(self.pool, self._run, feeds, run_options)
        try:
            outputs, compute_s = await asyncio.wait_for(work, budget_s)
        except (asyncio.CancelledError, asyncio.TimeoutError):
            run_options.terminate = True
            raise
        except Exception as e:
            # Named here: the ingress may only see this through a later part's arguments.
            raise RuntimeError(f"{self.spec['deployment']} (backend {self.spec['backend']}) failed: {short_error(e)}") from None
        reports[self.spec["deployment"]] = {"deployment": self.spec["deployment"], "backend": self.spec["backend"],
                                            "node_id": self.report["node_id"], "compute_s": compute_s}
        return {"outputs": outputs, "compute_s": compute_s, "node_id": self.report["node_id"], "parts": reports}

    def inputs(self):
        return self.input_specs

    def describe(self):
        return self.report


class Ingress:
    """The HTTP route and the handle's methods. It drives the parts over one of two data
    planes (``plane["kind"]``): ``compiled``, actors joined by a Ray Compiled Graph that this
    ingress builds and runs (no part handles), or ``handles``, one Serve deployment per part
    called through its DeploymentHandle (``part_handles``)."""

    def __init__(self, meta, timeout_s, plane, *part_handles):
        self.meta = meta
        self.timeout_s = float(timeout_s)
        self.handles = list(part_handles)
        self.specs = None
        # How many times each tensor reached this process from a part: with the boundaries
        # not asked for, only graph outputs should (the others go part to part).
        self.received = {}
        self.plane_info = {k: v for k, v in plane.items() if k != "workers"}
        self.plane = None
        self.plane_started = False
        if plane["kind"] == "compiled":
            self.plane = CompiledPlane(meta, plane["workers"], plane["lanes"], plane["inflight"])
            try:
                asyncio.get_running_loop().create_task(self._start_plane())
            except RuntimeError:
                pass  # no loop yet: the first call starts it

    async def _start_plane(self):
        if not self.plane_started:
            self.plane_started = True
            await self.plane.start()

    async def _plane_ready(self, deadline):
        """Waits, within the request's time, for the plane's first build."""
        await self._start_plane()
        self.plane.last_used = time.monotonic()
        self.plane.wake()
        if self.plane.unavailable() and self.plane.state == "starting":
            first = [ln["ready"] for ln in self.plane.lanes if ln["ready"] is not None]
            try:
                await asyncio.wait_for(asyncio.shield(asyncio.gather(*first)), max(0.1, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                pass
            except Exception:
                pass  # unavailable() says why
        why = self.plane.unavailable()
        if why:
            raise RuntimeError(why)

    def _start(self, env, deadline):
        """Calls every part at once, each with the graph inputs it reads and the responses of
        the parts it reads from: Ray Serve starts a part when those have answered and moves
        their tensors to it directly, so parts whose inputs are ready run side by side and no
        boundary tensor passes through the ingress. Returns the responses, in part order."""
        producer = {}
        responses = []
        left = deadline - time.monotonic()
        for i, spec in enumerate(self.meta["parts"]):
            direct = {n: env[n] for n in spec["inputs"] if n not in producer}
            upstream = sorted({producer[n] for n in spec["inputs"] if n in producer})
            # Each part gets what is left of the request's time, and stops its own run then.
            responses.append(self.handles[i].remote(direct, left, *(responses[j] for j in upstream)))
            for n in spec["outputs"]:
                producer[n] = i
        return responses

    async def _await(self, responses, wanted, deadline):
        """The results of the parts `wanted` (indices), within the request's time."""
        left = deadline - time.monotonic()
        try:
            return await asyncio.wait_for(asyncio.gather(*(responses[i] for i in wanted)), max(0.1, left + 1.0))
        except asyncio.TimeoutError:
            for r in responses:
                r.cancel()
            names = ", ".join(self.meta["parts"][i]["deployment"] for i in wanted)
            raise TimeoutError(f"{names} did not answer within {self.timeout_s:g}s (an actor or node may be down; Serve restarts it once a node with its resources is up)") from None
        except Exception as e:
            for r in responses:
                r.cancel()
            if isinstance(_innermost(e), asyncio.TimeoutError):
                raise TimeoutError(f"a part gave up: the request ran out of its {self.timeout_s:g}s") from None
            raise RuntimeError(short_error(e)) from None

    async def input_specs(self, deadline):
        """Each graph input's dtype and dims as the part that takes it declares them, asked
        once of the parts and kept."""
        if self.specs is None and self.plane is not None:
            await self._plane_ready(deadline)
            self.specs = self.plane.specs
        if self.specs is None:
            graph_inputs = set(self.meta["inputs"])
            specs = {}
            for i, spec in enumerate(self.meta["parts"]):
                if not graph_inputs.intersection(spec["inputs"]):
                    continue
                resp = self.handles[i].inputs.remote()
                try:
                    got = await asyncio.wait_for(resp, max(0.1, deadline - time.monotonic()))
                except Exception as e:
                    resp.cancel()
                    raise RuntimeError(f"{spec['deployment']} (backend {spec['backend']}) did not say what it takes: {short_error(e) or type(e).__name__}") from None
                for name, s in got.items():
                    if name in graph_inputs:
                        specs.setdefault(name, s)
            self.specs = specs
        return self.specs

    async def infer(self, feeds, boundaries=False):
        missing = [n for n in self.meta["inputs"] if n not in feeds]
        if missing:
            raise ValueError(f"missing graph input {missing[0]!r} (expected {self.meta['inputs']})")
        import numpy as np

        deadline = time.monotonic() + self.timeout_s
        specs = await self.input_specs(deadline)
        env = dict(feeds)
        for name in self.meta["inputs"]:
            env[name] = np.asarray(env[name])
            check_input(name, env[name].dtype, env[name].shape, specs.get(name))
        if self.plane is not None:
            await self._plane_ready(deadline)
            results = await self.plane.run({n: env[n] for n in self.meta["inputs"]}, boundaries, deadline, self.timeout_s)
            reports = {}
            for r in results:
                reports[r["report"]["deployment"]] = r["report"]
                env.update(r["outputs"])
                for n in r["outputs"]:
                    self.received[n] = self.received.get(n, 0) + 1
            return self._answer(env, reports, boundaries)
        responses = self._start(env, deadline)
        # Only the parts that give graph outputs answer to the ingress (every part, when the
        # boundaries are asked for); their results carry the others' reports.
        graph_outputs = set(self.meta["outputs"])
        wanted = [i for i, spec in enumerate(self.meta["parts"]) if boundaries or graph_outputs.intersection(spec["outputs"])]
        results = await self._await(responses, wanted, deadline)
        reports = {}
        for r in results:
            reports.update(r["parts"])
            env.update(r["outputs"])
            for n in r["outputs"]:
                self.received[n] = self.received.get(n, 0) + 1
        return self._answer(env, reports, boundaries)

    def _answer(self, env, reports, boundaries):
        parts = [reports[spec["deployment"]] for spec in self.meta["parts"] if spec["deployment"] in reports]
        out = {"outputs": {n: env[n] for n in self.meta["outputs"]}, "parts": parts}
        if boundaries:
            out["boundaries"] = {n: env[n] for spec in self.meta["parts"] for n in spec["outputs"]}
        return out

    async def describe(self):
        deadline = time.monotonic() + self.timeout_s
        if self.plane is not None:
            await self._start_plane()
            # Actors in a compiled graph take no other calls: their reports are those they
            # gave when they came up.
            parts = list(self.plane.part_reports()) or [
                {"deployment": s["deployment"], "backend": s["backend"], "error": self.plane.unavailable() or "not up"}
                for s in self.meta["parts"]]
            return {"name": self.meta["name"], "digest": self.meta["digest"], "inputs": self.meta["inputs"], "outputs": self.meta["outputs"],
                    "parts": parts, "data_plane": self.plane.describe(),
                    "ingress": {"pid": os.getpid(), "tensors_received": dict(self.received)}}
        parts = []
        for i, spec in enumerate(self.meta["parts"]):
            resp = self.handles[i].describe.remote()
            try:
                parts.append(await asyncio.wait_for(resp, max(0.1, deadline - time.monotonic())))
            except Exception as e:
                resp.cancel()
                parts.append({"deployment": spec["deployment"], "backend": spec["backend"], "error": short_error(e) or type(e).__name__})
        return {"name": self.meta["name"], "digest": self.meta["digest"], "inputs": self.meta["inputs"], "outputs": self.meta["outputs"],
                "parts": parts, "data_plane": dict(self.plane_info),
                "ingress": {"pid": os.getpid(), "tensors_received": dict(self.received)}}

    async def __call__(self, request):
        from starlette.responses import JSONResponse, Response

        try:
            specs = await self.input_specs(time.monotonic() + self.timeout_s)
        except Exception as e:
            return JSONResponse({"error": short_error(e)}, status_code=503)
        limit, why = body_limit(specs, self.meta["inputs"])
        try:
            body = bytearray()
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    raise ValueError(f"the body passes {limit} bytes ({why})")
        except ValueError as e:
            return JSONResponse({"error": str(e)}, status_code=400)
        try:
            feeds = read_npz(bytes(body), self.meta["inputs"], min(limit, MAX_BODY_BYTES), specs)
        except ValueError as e:
            return JSONResponse({"error": str(e)}, status_code=400)
        except Exception as e:
            return JSONResponse({"error": f"the body is not an .npz of the inputs: {short_error(e)}"}, status_code=400)
        want = request.query_params.get("boundaries", "0").lower() in ("1", "true", "yes")
        try:
            r = await self.infer(feeds, boundaries=want)
        except ValueError as e:
            return JSONResponse({"error": str(e)}, status_code=400)
        except Exception as e:
            return JSONResponse({"error": short_error(e)}, status_code=503)
        tensors = dict(r.get("boundaries") or {})
        tensors.update(r["outputs"])
        return Response(write_npz(tensors), media_type="application/octet-stream", headers={"x-cleave-parts": json.dumps(public_parts(r["parts"]))})


# ----------------------------------------------------------------------------------------
# The compiled data plane: the parts as Ray actors joined by a Ray Compiled Graph
# ----------------------------------------------------------------------------------------

DATA_PLANES = ("compiled", "handles")
# How long a rebuilt plane waits for its actors between two looks at why they are not up.
PLANE_WAIT_STEP_S = 5.0
# A compiled graph's channel readers poll (sched_yield) while they wait, a core's worth and more
# per idle deployment; after this many seconds without a request the plane may release its
# actors, the next request building them again (a model load and a compile: seconds). Off (0):
# with Ray 2.60, tearing down a graph whose channels cross nodes crashed the raylet
# (experimental_mutable_object_provider.cc:154, "Channel closed"), and a 9-part graph took
# longer to build than a request's 10 s.
PLANE_IDLE_S = 0.0
# Ray errors after which a compiled graph cannot run again: an actor or its node died, or
# Ray tore the graph down.
_PLANE_BROKEN = ("RayChannelError", "RayChannelTimeoutError", "ActorDiedError", "RayActorError",
                 "ActorUnavailableError", "RayCgraphCapacityExceeded", "RaySystemError")


def compiled_plane_refusal(partition, replicas):
    """Why the compiled data plane cannot serve this deployment, or None. One actor belongs to
    one compiled graph, so a lane of the plane holds one replica of every part: replica
    counts that differ between parts leave no whole number of lanes."""
    counts = {per_backend_value(replicas, p["backend"], 1) for p in partition.parts}
    if len(counts) > 1:
        return (f"the parts have different replica counts ({', '.join(str(c) for c in sorted(counts))}), and a compiled graph "
                "holds one replica of every part; give every backend the same --replicas")
    return None


class PartWorker:
    """One part on its engine, in a Ray actor that a compiled graph calls. It gets the
    request (graph inputs, deadline, whether the boundaries are wanted) when it reads a graph
    input, and the results of the parts it reads from; it answers what its consumers read
    and, separately, what the ingress needs (its time, and the tensors the client gets), so
    a boundary tensor goes part to part over Ray's channels and reaches the ingress only
    when asked for."""

    def __init__(self, spec, model_bytes, to_ingress, consumers):
        self.spec = spec
        self.session = open_part(spec, model_bytes if model_bytes is not None else spec["file"])
        self.engine = self.session.engine
        self.outputs = list(spec["outputs"])
        self.inputs = list(spec["inputs"])
        self.to_ingress = [n for n in self.outputs if n in set(to_ingress)]
        self.consumers = bool(consumers)
        self.name = f"{spec['deployment']} (backend {spec['backend']})"
        self.report = _node_report()
        self.report.update(deployment=spec["deployment"], backend=spec["backend"], engine=self.engine,
                           threads=int(spec.get("threads") or 1))
        if self.session.note:
            self.report["note"] = self.session.note

    def ready(self):
        return {"inputs": self.session.input_specs(), "report": self.report}

    def _answer(self, down, up):
        return (down, up) if self.consumers else up

    def step(self, request, *upstream):
        ctl = request["ctl"] if request is not None else None
        feeds = {}
        for r in upstream:
            if "skipped" in r:
                return self._answer(r, {"skipped": r["skipped"]})
            ctl = ctl or r["ctl"]
            for name in self.inputs:
                if name in r["outputs"]:
                    feeds.setdefault(name, r["outputs"][name])
        if request is not None:
            for name in self.inputs:
                if name in request["feeds"]:
                    feeds.setdefault(name, request["feeds"][name])
        missing = [n for n in self.inputs if n not in feeds]
        if missing:
            raise RuntimeError(f"{self.name} was not given {missing[0]!r}")
        left = ctl["deadline"] - time.time()
        if left <= 0:
            # Out of time before it started: nobody waits for it, so it does not run.
            skipped = {"skipped": f"{self.spec['deployment']} did not start: the request was out of time"}
            return self._answer(skipped, skipped)
        run_options = self.session.run_options()
        # Stops a run past the request's time where the engine can (ONNX Runtime, OpenVINO).
        timer = threading.Timer(left, setattr, (run_options, "terminate", True))
        timer.daemon = True
        timer.start()
        t = time.perf_counter()
        try:
            values = self.session.run(self.outputs, feeds, run_options)
        except Exception as e:
            raise RuntimeError(f"{self.name} failed: {short_error(e)}") from None
        finally:
            timer.cancel()
        compute_s = time.perf_counter() - t
        outputs = dict(zip(self.outputs, values))
        keep = self.outputs if ctl["boundaries"] else self.to_ingress
        up = {"outputs": {n: outputs[n] for n in keep},
              "report": {"deployment": self.spec["deployment"], "backend": self.spec["backend"],
                         "node_id": self.report["node_id"], "compute_s": compute_s}}
        return self._answer({"outputs": outputs, "ctl": ctl}, up)


class CompiledPlane:
    """The parts of one deployment as Ray actors (one per part in each lane, a lane per
    replica), each lane one compiled graph built from the partition's DAG and driven by the
    ingress that built it (a compiled graph runs only from the process that compiled it).
    When an actor or its node dies Ray tears the graph down; the plane then kills the lane's
    actors, makes new ones (they wait until a node with their resources is up), compiles
    again and says so in ``describe``."""

    def __init__(self, meta, workers, lanes, inflight):
        self.meta = meta
        self.workers = workers  # per part: (spec, model_bytes, actor options)
        self.inflight = inflight
        self.lanes = [{"index": i, "actors": [], "graph": None, "busy": 0, "ready": None,
                       "slots": None, "reports": []} for i in range(lanes)]
        self.state = "starting"
        self.rebuilds = 0
        self.idle_releases = 0
        self.release_error = None  # what went wrong releasing old actors, for describe
        self.last_used = time.monotonic()
        self.last_failure = None
        self.waiting = None
        self.specs = None
        producer = {}
        self.upstream, self.consumers, self.reads_request = [], [False] * len(meta["parts"]), []
        for p in meta["parts"]:
            ups = sorted({producer[n] for n in p["inputs"] if n in producer})
            for j in ups:
                self.consumers[j] = True
            self.upstream.append(ups)
            # A part reads the request when it takes a graph input, or nothing else tells it
            # the request's deadline.
            self.reads_request.append(any(n not in producer for n in p["inputs"]) or not ups)
            for n in p["outputs"]:
                producer[n] = len(self.upstream) - 1

    async def start(self):
        for lane in self.lanes:
            lane["slots"] = asyncio.Semaphore(self.inflight)
            lane["ready"] = asyncio.get_running_loop().create_task(self._build(lane, first=True))
        if PLANE_IDLE_S > 0:
            self.watch = asyncio.get_running_loop().create_task(self._idle_watch())

    async def _idle_watch(self):
        while True:
            await asyncio.sleep(max(1.0, PLANE_IDLE_S / 4))
            if self.state != "ready" or any(ln["busy"] for ln in self.lanes) or time.monotonic() - self.last_used < PLANE_IDLE_S:
                continue
            self.state = "idle"
            self.idle_releases += 1
            for lane in self.lanes:
                graph, old = lane["graph"], lane["actors"]
                lane.update(graph=None, actors=[], ready=None)
                asyncio.get_running_loop().create_task(self._release(graph, old))

    def wake(self):
        """Builds the lanes again after an idle release."""
        if self.state != "idle":
            return
        self.state = "starting"
        for lane in self.lanes:
            lane["slots"] = asyncio.Semaphore(self.inflight)
            lane["ready"] = asyncio.get_running_loop().create_task(self._build(lane, first=False))

    async def _build(self, lane, first):
        import ray

        cls = ray.remote(PartWorker)
        while True:
            actors = []
            try:
                for i, (spec, model_bytes, opts) in enumerate(self.workers):
                    actors.append(cls.options(**opts).remote(
                        spec, model_bytes, self.meta["outputs"], self.consumers[i]))
                infos = await self._await_ready(actors)
                graph = self._compile(actors)
            except Exception as e:
                for a in actors:
                    try:
                        ray.kill(a, no_restart=True)
                    except Exception:
                        pass
                self.last_failure = f"building the compiled graph failed: {short_error(e)}"
                if first:
                    self.state = "failed"
                    raise
                self.rebuilds += 1
                await asyncio.sleep(PLANE_WAIT_STEP_S)
                continue
            lane.update(actors=actors, graph=graph, reports=[x["report"] for x in infos])
            if self.specs is None:
                specs = {}
                for x in infos:
                    for name, s in x["inputs"].items():
                        if name in self.meta["inputs"]:
                            specs.setdefault(name, s)
                self.specs = specs
            self.waiting = None
            self.state = "ready" if all(ln["graph"] is not None for ln in self.lanes) else self.state
            return

    async def _await_ready(self, actors):
        """The actors' reports once all are up: an actor whose resources no live node has
        stays pending, and ``describe`` says which."""
        futures = [asyncio.ensure_future(a.ready.remote()) for a in actors]
        while True:
            pending = [i for i, f in enumerate(futures) if not f.done()]
            if not pending:
                return [f.result() for f in futures]
            self.waiting = [self.workers[i][0]["deployment"] for i in pending]
            await asyncio.wait([futures[i] for i in pending], timeout=PLANE_WAIT_STEP_S)

    def _compile(self, actors):
        from ray.dag import InputNode, MultiOutputNode

        down, up = [], []
        with InputNode() as request:
            for i, actor in enumerate(actors):
                args = [request] if self.reads_request[i] else []
                args += [down[j] for j in self.upstream[i]]
                if not self.reads_request[i]:
                    args = [None] + args
                if self.consumers[i]:
                    d, u = actor.step.options(num_returns=2).bind(*args)
                else:
                    d, u = None, actor.step.bind(*args)
                down.append(d)
                up.append(u)
            dag = MultiOutputNode(up)
        return dag.experimental_compile(enable_asyncio=True, _max_inflight_executions=self.inflight)

    def _pick(self):
        ready = [ln for ln in self.lanes if ln["graph"] is not None]
        if not ready:
            return None
        return min(ready, key=lambda ln: ln["busy"])

    def unavailable(self):
        """Why no request can run now, or None."""
        if self._pick() is not None:
            return None
        if self.state == "failed":
            return f"the compiled data plane could not be built: {self.last_failure}"
        why = f"the compiled data plane is being rebuilt after: {self.last_failure}" if self.rebuilds else "the compiled data plane is starting"
        if self.waiting:
            why += f"; waiting for a node with the resources of {', '.join(self.waiting)}"
        return why

    async def run(self, feeds, boundaries, deadline, timeout_s):
        lane = self._pick()
        if lane is None:
            raise RuntimeError(self.unavailable())
        request = {"feeds": feeds, "ctl": {"deadline": time.time() + (deadline - time.monotonic()), "boundaries": boundaries}}
        self.last_used = time.monotonic()
        lane["busy"] += 1
        slots = lane["slots"]
        try:
            await asyncio.wait_for(slots.acquire(), max(0.1, deadline - time.monotonic()))
        except TimeoutError:
            lane["busy"] -= 1
            raise TimeoutError(f"no room in the compiled graph within {timeout_s:g}s ({self.inflight} requests in it)") from None
        graph = lane["graph"]
        task = None
        try:
            if graph is None:
                raise RuntimeError(self.unavailable())
            task = asyncio.ensure_future(_gather(await graph.execute_async(request)))
            results = await asyncio.wait_for(asyncio.shield(task), max(0.1, deadline - time.monotonic() + 1.0))
        except Exception as e:
            if isinstance(e, TimeoutError) and not _plane_broken(e):
                names = ", ".join(p["deployment"] for p in self.meta["parts"])
                raise TimeoutError(f"{names} did not answer within {timeout_s:g}s (an actor or node may be down)") from None
            if _plane_broken(e):
                self._broken(lane, graph, e)
                raise RuntimeError(f"{short_error(e)} (the compiled data plane is being rebuilt)") from None
            raise RuntimeError(short_error(e)) from None
        finally:
            lane["busy"] -= 1
            if task is not None and not task.done():
                # Given up: the graph still owes this execution's results; they are read
                # before the slot is given back, so Ray's count of executions in flight stays
                # in step with the slots.
                asyncio.get_running_loop().create_task(self._drain(lane, graph, task, slots))
            else:
                slots.release()
        skipped = [r["skipped"] for r in results if "skipped" in r]
        if skipped:
            raise TimeoutError(f"a part gave up: the request ran out of its {timeout_s:g}s ({skipped[0]})")
        return results

    async def _drain(self, lane, graph, task, slots):
        try:
            await asyncio.wait_for(task, 600)
        except Exception as e:
            if _plane_broken(e):
                self._broken(lane, graph, e)
        finally:
            slots.release()

    def _broken(self, lane, graph, e):
        if lane["graph"] is not graph or graph is None:
            return  # already being rebuilt
        self.last_failure = short_error(e)
        self.rebuilds += 1
        self.state = "rebuilding"
        old = lane["actors"]
        lane.update(graph=None, actors=[], slots=asyncio.Semaphore(self.inflight))
        lane["ready"] = asyncio.get_running_loop().create_task(self._rebuild(lane, graph, old))

    async def _rebuild(self, lane, graph, old):
        await self._release(graph, old)
        await self._build(lane, first=False)

    async def _release(self, graph, old):
        import ray

        for a in old:
            try:
                ray.kill(a, no_restart=True)
            except Exception as e:  # already gone with its node
                self.release_error = short_error(e)
        # Teardown waits for the actors' loops to end (up to Ray's teardown timeout): off the
        # event loop, so requests keep being answered meanwhile.
        if graph is not None:
            try:
                await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, graph.teardown, True), 60)
            except Exception as e:
                self.release_error = short_error(e) or type(e).__name__

    def describe(self):
        return {"kind": "compiled", "state": self.state, "lanes": len(self.lanes), "max_in_flight_per_lane": self.inflight,
                "rebuilds": self.rebuilds, "last_failure": self.last_failure, "waiting_for": self.waiting,
                "idle_releases": self.idle_releases, "idle_release_after_s": PLANE_IDLE_S, "release_error": self.release_error}

    def part_reports(self):
        for lane in self.lanes:
            if lane["reports"]:
                return lane["reports"]
        return []


async def _gather(futures):
    """Every result of one execution, all read even when one is an error (an unread result
    stays buffered in the graph), the first error raised."""
    results, first = [], None
    for f in futures if isinstance(futures, list) else [futures]:
        try:
            results.append(await f)
        except Exception as e:
            first = first or e
    if first is not None:
        raise first
    return results


def _plane_broken(e):
    for x in (e, _innermost(e)):
        for cls in type(x).__mro__:
            if cls.__name__ in _PLANE_BROKEN:
                return True
    return "torn down" in str(e)


def public_parts(parts):
    """What any HTTP client may see of each part: its name, backend and compute time (which
    Ray node ran it is for ``describe``, on the handle only)."""
    return [{k: p[k] for k in ("deployment", "backend", "compute_s") if k in p} for p in parts]


def body_limit(specs, inputs):
    """The largest request body worth reading, and why: when every input's dtype and dims are
    fixed, eight times what they declare (so a tensor of a wider dtype still reaches the header
    check, which names it) plus room for the archive's headers; else CLEAVE_MAX_BODY_BYTES."""
    import numpy as np

    total = 0
    for name in inputs:
        spec = specs.get(name)
        if spec is None or spec[0] is None or any(d is None for d in spec[1]):
            return MAX_BODY_BYTES, "CLEAVE_MAX_BODY_BYTES"
        n = np.dtype(spec[0]).itemsize
        for d in spec[1]:
            n *= d
        total += n
    # An .npy header is at most a few hundred bytes, a zip entry's records about as much.
    declared = 8 * total + 4096 * len(inputs) + 65536
    if declared >= MAX_BODY_BYTES:
        return MAX_BODY_BYTES, "CLEAVE_MAX_BODY_BYTES"
    return declared, "eight times what the model's inputs declare, and the archive's headers"


def check_input(name, dtype, shape, spec):
    """Refuses (ValueError) a tensor whose dtype or dims differ from what the model takes.
    `spec` is [dtype name or None, dims with None where dynamic], or None when unknown."""
    if spec is None:
        return
    want_dtype, want_dims = spec
    if want_dtype is not None and str(dtype) != want_dtype:
        raise ValueError(f"input {name!r} is {dtype}, the model takes {want_dtype}")
    shown = "[" + ", ".join("?" if d is None else str(d) for d in want_dims) + "]"
    if len(shape) != len(want_dims) or any(w is not None and w != d for d, w in zip(shape, want_dims)):
        raise ValueError(f"input {name!r} has shape {list(shape)}, the model takes {shown}")


def read_npz(body, inputs, max_bytes, specs=None):
    """The graph inputs in an .npz body. Only members named for an input are read, and each
    only after its .npy header (dtype and shape, read before any data is unpacked) has been
    checked against what the model takes (`specs`, see check_input) and its size against
    `max_bytes` in all: a small archive cannot expand into gigabytes, a tensor of the wrong
    type or shape is refused before it is unpacked, and members the model does not take are
    never decompressed."""
    import zipfile

    import numpy as np

    if not body.startswith(b"PK"):
        raise ValueError("the body is not an .npz archive (np.savez writes one)")
    specs = specs or {}
    wanted = set(inputs)
    feeds = {}
    total = 0
    with zipfile.ZipFile(io.BytesIO(body)) as z:
        for info in z.infolist():
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            if name not in wanted or name in feeds:
                continue
            # The zip directory's uncompressed size bounds what unpacking may produce.
            if total + info.file_size > max_bytes:
                raise ValueError(f"the inputs unpack to more than {max_bytes} bytes, the most this model takes")
            with z.open(info) as f:
                try:
                    version = np.lib.format.read_magic(f)
                    if version == (1, 0):
                        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
                    else:
                        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
                except ValueError as e:
                    raise ValueError(f"{info.filename} is not an .npy file: {e}") from None
                if dtype.hasobject:
                    raise ValueError(f"input {name!r} holds Python objects, which are refused")
                check_input(name, dtype, shape, specs.get(name))
                nbytes = dtype.itemsize
                for d in shape:
                    nbytes *= d
                total += nbytes
                if total > max_bytes:
                    raise ValueError(f"the inputs unpack to more than {max_bytes} bytes, the most this model takes")
                data = bytearray(nbytes)
                view = memoryview(data)
                got = 0
                while got < nbytes:
                    n = f.readinto(view[got:])
                    if not n:
                        raise ValueError(f"input {name!r} ends after {got} of the {nbytes} bytes its header declares")
                    got += n
            feeds[name] = np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")
    return feeds


def _innermost(e):
    seen = 0
    while getattr(e, "cause", None) is not None and seen < 8:
        e = e.cause
        seen += 1
    return e


def write_npz(tensors):
    """An .npz of `tensors`, any name included (np.savez takes its names as keyword
    arguments, so a tensor called ``file`` would clash with its first parameter)."""
    import zipfile

    import numpy as np

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, value in tensors.items():
            with z.open(name + ".npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(value), allow_pickle=False)
    return buf.getvalue()


def short_error(e):
    """The first line of the innermost cause: Ray wraps errors raised in actors in layers of
    tracebacks that bury the one sentence a person needs."""
    e = _innermost(e)
    text = str(e).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # RayTaskError text starts with the task's name and a traceback; the message is last.
    if lines and (lines[0].startswith("ray::") or "Traceback" in text):
        line = lines[-1]
    else:
        line = lines[0] if lines else ""
    name = type(e).__name__
    return f"{name}: {line}" if line and not line.startswith(name) else (line or name)


def part_specs(partition, opts, threads=None):
    """What each part's replica is built from: its conn.json record and its thread count."""
    specs = []
    for p in partition.parts:
        spec = {k: p[k] for k in ("index", "file", "inputs", "outputs", "backend", "deployment", "engine", "format")}
        spec["threads"] = per_backend_value(threads, p["backend"], default_threads(opts[p["deployment"]]))
        specs.append(spec)
    return specs


def ingress_meta(partition, specs, name, digest):
    """What the ingress knows of the partition: its graph inputs and outputs, and the tensors
    each part reads and gives."""
    return {
        "name": name,
        "digest": digest,
        "inputs": partition.inputs,
        "outputs": partition.outputs,
        "parts": [{k: s[k] for k in ("inputs", "outputs", "backend", "deployment")} for s in specs],
    }


def build_app(conn_path, resources=None, *, name=None, request_timeout_s=DEFAULT_REQUEST_TIMEOUT_S,
              replicas=None, threads=None, data_plane="handles"):
    """The Ray Serve application for the partition at `conn_path`.

    `resources` maps backend names to ray_actor_options fragments (see the module docstring);
    `request_timeout_s` bounds a whole request inside the ingress; `replicas` and `threads`
    map backend names (``"*"`` for the rest) to each part's replica count (default 1) and its
    engine's intra-op threads (default: the ``num_cpus`` its options reserve, else 1), as
    ``{"cpu": 2}``, or a string ``"cpu=2,npu=1"`` as the command line takes them.
    `data_plane` is ``"handles"`` (one Serve deployment per part, called by handle; the
    default) or ``"compiled"`` (the parts as actors joined by a Ray Compiled Graph that the
    ingress drives; where it cannot serve the partition, the handles, and ``describe`` says
    why).
    """
    if data_plane not in DATA_PLANES:
        raise ValueError(f"data_plane {data_plane!r}: give one of {', '.join(DATA_PLANES)}")
    from ray import cloudpickle, serve

    module = sys.modules.get(PartReplica.__module__)
    if module is not None and module.__name__ != "__main__":
        # Imported (an exported app.py): ship the classes by value, so that replicas on
        # other nodes need neither this file nor the application folder.
        cloudpickle.register_pickle_by_value(module)
    if isinstance(replicas, str):
        replicas = parse_per_backend(replicas, "replicas")
    if isinstance(threads, str):
        threads = parse_per_backend(threads, "threads")
    partition = Partition(conn_path)
    opts = actor_options(partition, resources, replicas)
    specs = part_specs(partition, opts, threads)
    models = []
    for p in partition.parts:
        model_bytes = None
        if os.path.getsize(p["file"]) <= INLINE_MAX_BYTES:
            with open(p["file"], "rb") as f:
                model_bytes = f.read()
        models.append(model_bytes)
    plane = {"kind": data_plane}
    if data_plane == "compiled":
        why = compiled_plane_refusal(partition, replicas)
        if why:
            plane = {"kind": "handles", "why": f"the compiled data plane cannot serve it: {why}"}
    else:
        plane["why"] = "the default (--data-plane compiled joins the parts by a Ray Compiled Graph instead)"
    handles = []
    if plane["kind"] == "compiled":
        lanes = per_backend_value(replicas, partition.parts[0]["backend"], 1)
        plane.update(lanes=lanes, inflight=max(4, 2 * len(partition.parts)),
                     workers=[(spec, model_bytes, opts[p["deployment"]]) for p, spec, model_bytes in zip(partition.parts, specs, models)])
    else:
        for p, spec, model_bytes in zip(partition.parts, specs, models):
            dep = serve.deployment(
                PartReplica,
                name=p["deployment"],
                num_replicas=per_backend_value(replicas, p["backend"], 1),
                ray_actor_options=opts[p["deployment"]],
                max_ongoing_requests=PART_MAX_ONGOING,
                # A part that cannot load will not load on a retry either; fail the deploy soon.
                max_constructor_retry_count=3,
                health_check_period_s=2,
                health_check_timeout_s=10,
            )
            handles.append(dep.bind(spec, model_bytes, opts[p["deployment"]]))
    meta = ingress_meta(partition, specs, name or partition.stem, partition.digest(settings(resources, replicas, threads, data_plane)))
    ingress = serve.deployment(
        Ingress,
        name="ingress",
        num_replicas=1,
        ray_actor_options=opts["ingress"],
        max_ongoing_requests=INGRESS_MAX_ONGOING,
        health_check_period_s=2,
        health_check_timeout_s=10,
    )
    return ingress.bind(meta, request_timeout_s, plane, *handles)


# ----------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------


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


def split_address(address):
    addr = address
    for prefix in ("ray://", "http://"):
        if addr.startswith(prefix):
            addr = addr[len(prefix):]
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


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
        die(2, f"cannot reach the Ray cluster at {address}: no answer within {timeout_s:g}s (is it a Ray head's GCS port?)")
    if "error" in box:
        die(2, f"cannot reach the Ray cluster at {address}: {short_error(box['error'])}")
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
            die(1, f"no live node offers {hint} for {p['deployment']} (backend {p['backend']}): start one with e.g. `ray start --resources='{{\"{p['backend']}\": 1}}'`, or map the backend with --resources")


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


def deploy(ray, args, partition, name, *, reuse):
    """Deploys (or, with reuse, keeps a running application of the same partition); returns
    (ingress handle, whether this call deployed it). On the compiled data plane it returns
    once the plane is built; where the plane cannot be built it deploys the handle chain
    instead and says why on stderr."""
    from ray import serve

    resources = parse_resources_or_die(args.resources)
    replicas, threads = parse_counts_or_die(args)
    plane = getattr(args, "data_plane", None) or "handles"
    opts = actor_options(partition, resources, replicas)
    if reuse:
        st = app_status(serve, name)
        if st is not None and str(getattr(st.status, "value", st.status)) == "RUNNING":
            h = serve.get_app_handle(name)
            try:
                d = h.describe.remote().result(timeout_s=30)
                if d.get("digest") == partition.digest(settings(resources, replicas, threads, plane)):
                    return h, False
            except Exception:
                pass
    check_resources(ray, partition, opts)
    serve.start(proxy_location="HeadOnly", http_options={"host": args.http_host, "port": args.http_port})
    t0 = time.monotonic()
    handle = _run_app(serve, args, partition, name, resources, replicas, threads, plane, args.timeout)
    why = _plane_failure(handle, max(1.0, args.timeout - (time.monotonic() - t0)))
    if why:
        print(f"note: {name}: {why}; serving it on the handle chain instead (--data-plane handles)", file=sys.stderr, flush=True)
        serve.delete(name)
        handle = _run_app(serve, args, partition, name, resources, replicas, threads, "handles", args.timeout)
    return handle, True


def _run_app(serve, args, partition, name, resources, replicas, threads, plane, timeout_s):
    app = build_app(partition.path, resources, name=name, request_timeout_s=args.request_timeout,
                    replicas=replicas, threads=threads, data_plane=plane)
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
            die(1, f"the compiled data plane did not come up within {timeout_s:g}s"
                   + (f": waiting for a node with the resources of {', '.join(waiting)}" if waiting else ""))
        time.sleep(0.2)


def parse_counts_or_die(args):
    """--replicas and --threads as per-backend tables."""
    try:
        return (parse_per_backend(getattr(args, "replicas", None), "replicas"),
                parse_per_backend(getattr(args, "threads", None), "threads"))
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
        print(f"  {p['deployment']:<14} backend {p['backend']:<6} node {p['node_id'][:12]}{head} {p.get('node_ip') or ''} [{res}]")


def model_inputs(model, fmt):
    """[(name, numpy dtype, dims with None where free)] of a model file's inputs, as the part
    engines read them."""
    import numpy as np

    if fmt not in SERVED_FORMATS:
        die(2, f"{model}: a {fmt or 'unknown'} model, which nothing here runs")
    if fmt == "tflite":
        session = _LiteRtPart(model, 1)
    elif fmt == "circle":
        session = _OnertPart(model)
    else:
        session = _OrtPart(model, "cpu", 1)
    return [(name, np.dtype(dtype or "float32"), dims) for name, (dtype, dims) in session.input_specs().items()]


def source_format(partition):
    return part_format({"file": partition.source_file, "format": (partition.raw.get("source") or {}).get("format")})


def random_feeds(source_file, partition, seed):
    """Seeded inputs shaped like the source model's (free dimensions taken as 1)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    feeds = {}
    for name, dt, dims in model_inputs(source_file, source_format(partition)):
        if name not in partition.inputs:
            continue
        shape = [d if d is not None and d > 0 else 1 for d in dims]
        if np.issubdtype(dt, np.floating):
            feeds[name] = rng.standard_normal(shape).astype(dt)
        elif dt == np.bool_:
            feeds[name] = rng.integers(0, 2, shape).astype(dt)
        else:
            feeds[name] = rng.integers(0, 4, shape).astype(dt)
    return feeds


def reference_run(source_file, feeds, names):
    """The whole source model (ONNX Runtime for ONNX, LiteRT for TFLite), every tensor in
    `names` read out."""
    if os.path.splitext(source_file)[1].lower() == ".tflite":
        return _litert_reference(source_file, feeds, names)
    try:
        import onnx
    except ImportError:
        die(2, "verify needs the onnx package to expose the source's boundary tensors: pip install onnx")
    import onnxruntime as ort

    model = onnx.load(source_file)
    have = {o.name for o in model.graph.output}
    for n in names:
        if n not in have:
            # A name alone is enough: ONNX Runtime infers the type of an added output.
            model.graph.output.append(onnx.ValueInfoProto(name=n))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    # Full graph optimisation may fuse an intermediate tensor away; basic keeps every one.
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return dict(zip(names, sess.run(list(names), feeds)))


def _litert_reference(source_file, feeds, names):
    """The whole TFLite model in LiteRT, its intermediate tensors kept so the boundaries can
    be read after the run."""
    model = _LiteRtPart(source_file, 1, keep_all=True)
    model.invoke(feeds)
    got = model.tensors(names)
    if got is None:
        missing = next(n for n in names if n not in (model.tensors([n]) or {}))
        die(2, f"{source_file}: has no tensor named {missing!r}, which the partition names")
    return got


def running_http(args):
    """Where Serve's proxy really listens: options given to an already running Serve are
    ignored. Read through a private API, hence the fallback."""
    try:
        from ray.serve.context import _get_global_client

        cfg = _get_global_client().http_config
        return cfg.host, int(cfg.port)
    except Exception:
        return args.http_host, args.http_port


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
        print(f"note: Serve was already running on this cluster with HTTP on {host}:{port}; --http-port/--http-host apply only when this command starts Serve")
    print(f"route: http://{host}:{port}/{name}  (POST an .npz of {', '.join(partition.inputs)}; ?boundaries=1 adds the tensors between parts)")
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
Needs ray[serve] and numpy on every node, with onnxruntime for ONNX parts and ai-edge-litert for TFLite parts."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from ray_app import build_app  # noqa: E402

# Backend -> ray_actor_options, as given to `export --resources` (see ray_app.py's docstring);
# CLEAVE_RESOURCES in the environment replaces it.
RESOURCES = json.loads(os.environ.get("CLEAVE_RESOURCES") or %(resources)r)

# Backend -> replicas and intra-op threads, as given to `export --replicas/--threads`.
REPLICAS = %(replicas)r
THREADS = %(threads)r
# How tensors move between parts: "compiled" (a Ray Compiled Graph) or "handles".
DATA_PLANE = %(data_plane)r

app = build_app(os.path.join(HERE, %(conn)r), RESOURCES, name=%(name)r, replicas=REPLICAS, threads=THREADS,
                data_plane=DATA_PLANE)
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
    shutil.copyfile(os.path.abspath(__file__), os.path.join(out, "ray_app.py"))
    with open(os.path.join(out, "app.py"), "w", encoding="utf-8") as f:
        f.write(APP_PY % {"resources": json.dumps(resources), "conn": conn_name, "name": name,
                          "replicas": replicas, "threads": threads, "data_plane": args.data_plane})
    with open(os.path.join(out, "serve_config.yaml"), "w", encoding="utf-8") as f:
        f.write(CONFIG_YAML % {"port": args.http_port, "host": args.http_host, "name": name, "dir": out})
    print(f"wrote {out}: app.py, serve_config.yaml, ray_app.py, {conn_name} and {len(partition.parts)} parts")
    print(f"  serve run {os.path.join(out, 'serve_config.yaml')}    # or, from {out}: serve run app:app --working-dir .")
    return 0


def percentile(values, q):
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else float("nan")


def run_load(call, count, in_flight):
    """`count` calls of `call()` (which answers the parts' compute times) with `in_flight` of
    them outstanding at any time."""
    lock = threading.Lock()
    state = {"next": 0}
    lat, compute, errors = [], [], []

    def worker():
        while True:
            with lock:
                if state["next"] >= count:
                    return
                state["next"] += 1
            t = time.perf_counter()
            try:
                times = call()
            except Exception as e:
                with lock:
                    errors.append(short_error(e) or type(e).__name__)
                continue
            dt = time.perf_counter() - t
            with lock:
                lat.append(dt)
                compute.append(times)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(in_flight)]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.perf_counter() - t0, lat, compute, errors


def handle_caller(handle, feeds, timeout_s):
    def call():
        r = handle.infer.remote(feeds).result(timeout_s=timeout_s)
        return [p["compute_s"] for p in r["parts"]]
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
        return [p["compute_s"] for p in json.loads(r.headers.get("x-cleave-parts") or "[]")]
    return call


def cmd_bench(args):
    import numpy as np

    partition = load_partition(args.conn)
    name = args.name or partition.stem
    try:
        levels = sorted({int(x) for x in args.in_flight.split(",") if x.strip()})
    except ValueError:
        die(2, f"--in-flight {args.in_flight!r} is not a comma-separated list of counts")
    if not levels or levels[0] < 1 or args.requests < 1:
        die(2, "--requests and every --in-flight count must be at least 1")
    ray = connect(args.address, args.timeout)
    from ray import serve

    handle, deployed = deploy(ray, args, partition, name, reuse=True)
    try:
        feeds = random_feeds(partition.source_file, partition, 0) if partition.source_file and os.path.exists(partition.source_file) else None
        if feeds is None:
            feeds = _feeds_from_part(partition)
        desc = describe_placement(handle)
        client_timeout = args.request_timeout + 10
        hops = len(partition.parts) + 1
        if args.via == "http":
            host, port = running_http(args)
            call = http_caller(host, port, name, feeds, client_timeout)
        else:
            call = handle_caller(handle, feeds, client_timeout)
        for _ in range(max(0, args.warmup)):
            call()
        rows = []
        per_part = None
        for k in levels:
            wall, lat, compute, errors = run_load(call, args.requests, k)
            row = {"in_flight": k, "requests": args.requests, "ok": len(lat), "errors": len(errors),
                   "throughput_rps": len(lat) / wall if wall > 0 else 0.0,
                   "latency_p50_ms": percentile(lat, 50) * 1e3, "latency_p90_ms": percentile(lat, 90) * 1e3,
                   "latency_mean_ms": (float(np.mean(lat)) * 1e3) if lat else float("nan")}
            if errors:
                row["first_error"] = errors[0]
            if compute:
                c = np.asarray(compute)
                row["compute_sum_mean_ms"] = float(c.sum(axis=1).mean() * 1e3)
                if k == 1:
                    per_part = (c.mean(axis=0) * 1e3).tolist()
                    row["per_hop_overhead_ms"] = (row["latency_mean_ms"] - row["compute_sum_mean_ms"]) / hops
            rows.append(row)
        result = {
            "name": name, "address": args.address, "parts": len(partition.parts), "hops": hops, "via": args.via,
            "data_plane": desc.get("data_plane"),
            "levels": rows,
            "per_hop_overhead_ms": next((r.get("per_hop_overhead_ms") for r in rows if r["in_flight"] == 1), None),
            "placement": [{"deployment": p["deployment"], "backend": p["backend"], "node_id": p.get("node_id"),
                           "is_head": p.get("is_head"), "compute_mean_ms": (per_part[i] if per_part else None)}
                          for i, p in enumerate(desc["parts"])],
        }
        failed = any(r["errors"] for r in rows)
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            plane = desc.get("data_plane") or {}
            print(f"{name} on {args.address}: {len(partition.parts)} parts on the {plane.get('kind', '?')} data plane"
                  + (f" ({plane['why']})" if plane.get("why") else "")
                  + f", requests through the {args.via}, {args.requests} per row")
            print(f"{'in flight':>9} {'req/s':>8} {'p50 ms':>8} {'p90 ms':>8} {'compute ms':>10} {'errors':>6}")
            for r in rows:
                print(f"{r['in_flight']:>9} {r['throughput_rps']:>8.1f} {r['latency_p50_ms']:>8.2f} {r['latency_p90_ms']:>8.2f} "
                      f"{r.get('compute_sum_mean_ms', float('nan')):>10.2f} {r['errors']:>6}")
            for p in result["placement"]:
                c = f"{p['compute_mean_ms']:.2f} ms" if p["compute_mean_ms"] is not None else "-"
                print(f"  {p['deployment']:<14} backend {p['backend']:<6} compute {c:>10}  node {str(p['node_id'])[:12]}{' (head)' if p['is_head'] else ''}")
            if result["per_hop_overhead_ms"] is not None:
                print(f"overhead (1 in flight): {result['per_hop_overhead_ms']:.2f} ms a hop = (mean latency - summed part compute) / {hops} hops "
                      "(the client's to the ingress, and one into each part)")
            for r in rows:
                if r["errors"]:
                    print(f"{r['errors']} requests failed at {r['in_flight']} in flight, first: {r['first_error']}")
        return 1 if failed else 0
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
        for kind, names, have in (("output", partition.outputs, got["outputs"]), ("boundary", boundary_names, got["boundaries"])):
            for n in names:
                a = np.asarray(have[n])
                b = np.asarray(want[n])
                if a.shape != b.shape:
                    rows.append({"tensor": n, "kind": kind, "ok": False, "max_abs_diff": None, "why": f"shape {a.shape} vs {b.shape}"})
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
            placement.append({"deployment": p["deployment"], "backend": p["backend"], "node_id": p.get("node_id"),
                              "is_head": p.get("is_head"), "node_resources": res, "placed_ok": placed})
        ok = all(r["ok"] for r in rows) and all(p["placed_ok"] for p in placement)
        if args.json:
            print(json.dumps({"name": name, "seed": args.seed, "ok": ok, "tensors": rows, "placement": placement}, indent=2))
        else:
            how = f"relative L2 error <= {args.tol:g}" if args.rtol is None and args.atol is None else f"rtol {args.rtol}, atol {args.atol}"
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


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m cleave.serve",
        description="Serve a cleave partition (stem.conn.json) on a Ray cluster: its parts, placed by their backends' Ray "
                    "resources, joined by a Ray Compiled Graph (or by Serve deployment handles, --data-plane handles) behind one "
                    "HTTP route, a Ray Serve deployment.",
        epilog="Placement rule: cpu -> anywhere; gpu*/cuda* -> num_gpus; any other backend B -> custom resource B that "
               "nodes declare (ray start --resources='{\"B\": 1}'). Exit codes: 0 ok, 1 failed check, 2 usage or unreachable cluster.")
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p, cluster=True):
        p.add_argument("conn", help="the partition's stem.conn.json (part files beside it)")
        if cluster:
            p.add_argument("--address", required=True, metavar="HOST:PORT", help="the Ray head's GCS address, as `ray start --head` printed it")
            p.add_argument("--timeout", type=float, default=120.0, metavar="S", help="seconds to wait for the cluster and for the deployments to come up (default 120)")
            p.add_argument("--request-timeout", type=float, default=DEFAULT_REQUEST_TIMEOUT_S, metavar="S",
                           help=f"seconds one request may take inside the application before it fails (default {DEFAULT_REQUEST_TIMEOUT_S:g})")
        p.add_argument("--resources", metavar="JSON", help='backend -> ray_actor_options, replacing the placement rule, e.g. \'{"npu": {"resources": {"npu": 1}}, "gpu0": {"num_gpus": 1}}\'')
        p.add_argument("--replicas", metavar="SPEC", help="replicas of each part, N for all or per backend, e.g. 'cpu=2,npu=1' "
                                                          "('*=N' for the backends not named; default 1)")
        p.add_argument("--threads", metavar="SPEC", help="intra-op threads of each part's engine, N or per backend as --replicas "
                                                         "(default: the num_cpus --resources reserves for it, else 1)")
        p.add_argument("--name", help="Ray Serve application name, also the route /NAME (default: the partition's stem)")
        p.add_argument("--http-port", type=int, default=DEFAULT_HTTP_PORT, metavar="P", help=f"HTTP port of the route (default {DEFAULT_HTTP_PORT})")
        p.add_argument("--http-host", default="127.0.0.1", metavar="HOST",
                       help="address Serve's HTTP proxy listens on; 0.0.0.0 for other machines (default 127.0.0.1)")
        p.add_argument("--data-plane", choices=DATA_PLANES, default="handles",
                       help="how tensors move between parts: 'compiled', the parts as Ray actors joined by a Ray Compiled Graph "
                            "that the ingress drives (shared-memory channels on a node, no Serve request per part), or 'handles', "
                            "one Serve deployment per part called by handle (default handles; where a compiled graph cannot serve "
                            "the partition, handles, and the reason is printed)")

    p = sub.add_parser("serve", help="deploy on a running cluster and serve until Ctrl-C")
    common(p)
    p.add_argument("--detach", action="store_true", help="return once deployed, leaving the application running")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("export", help="write a self-contained Ray Serve application folder (serve run / serve deploy)")
    common(p, cluster=False)
    p.add_argument("out_dir", metavar="OUT_DIR")
    p.add_argument("--force", action="store_true", help="write into a non-empty OUT_DIR")
    p.set_defaults(func=cmd_export)

    for cmd, text in (("bench", "time requests through the Python handle with 1 and with N in flight"),
                      ("verify", "compare outputs and every boundary tensor with the source model run whole")):
        p = sub.add_parser(cmd, help=text)
        common(p)
        p.add_argument("--json", action="store_true", help="print the result as JSON")
        p.add_argument("--keep", action="store_true", help="leave the application running if this command deployed it")
        if cmd == "bench":
            p.add_argument("--requests", type=int, default=50, metavar="N", help="requests per in-flight level (default 50)")
            p.add_argument("--in-flight", default="1,8", metavar="LIST", help="comma-separated in-flight levels (default 1,8)")
            p.add_argument("--warmup", type=int, default=3, metavar="N", help="untimed requests first (default 3)")
            p.add_argument("--via", choices=("handle", "http"), default="handle",
                           help="send the requests through the Python handle, or as HTTP POSTs of an .npz to the route (default handle)")
            p.set_defaults(func=cmd_bench)
        else:
            p.add_argument("--seed", type=int, default=0, help="seed of the random input (default 0)")
            p.add_argument("--tol", type=float, default=1e-3, help="largest relative L2 error of a float tensor (default 1e-3, as cleave verify)")
            p.add_argument("--rtol", type=float, help="compare element by element instead: |a-b| <= atol + rtol*|b| (rtol default 1e-4)")
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


if __name__ == "__main__":
    main()
