"""cleave: split a neural-network model across heterogeneous devices and run the pieces.

The pipeline of the ``cleave`` command, on models and numpy arrays::

    import numpy as np
    import cleave

    model = cleave.load("examples/tiny_cnn.onnx", shape={"input": (1, 3, 16, 16)})
    plan = model.partition(rules="examples/tiny_cnn.part")   # or devices=["nnapi", "cpu"]
    print([(p.backend, len(p.nodes)) for p in plan.parts])
    plan.save("out/tiny_cnn")                                 # the CLI's files
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16), dtype=np.float32)
    got = plan.runner().run({"input": x})
    want = model.run({"input": x})
    assert all(np.allclose(got[k], want[k], atol=1e-5) for k in want)

Every failure raises a subclass of :class:`cleave.Error`.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _engines
from ._errors import (
    ArgumentError,
    EngineError,
    Error,
    FileError,
    InternalError,
    InvalidModelError,
    LimitError,
    UnsupportedError,
)

_engines.configure()

from . import _cleave  # noqa: E402  (after the engines are pointed at this Python's packages)

__version__: str = _cleave.__version__

__all__ = [
    "load",
    "verify",
    "builtin_devices",
    "Model",
    "Plan",
    "Part",
    "Runner",
    "Generator",
    "Session",
    "Query",
    "NodePlacement",
    "TensorInfo",
    "Verification",
    "Error",
    "InvalidModelError",
    "UnsupportedError",
    "ArgumentError",
    "EngineError",
    "FileError",
    "InternalError",
    "LimitError",
]

PathLike = Union[str, "os.PathLike[str]"]
Rules = Union[PathLike, Mapping[str, Any]]
Feeds = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class TensorInfo:
    """A graph input or output: its name, numpy dtype name and dims (an int, a symbolic
    name, or None when unknown; ``shape`` is None when even the rank is unknown)."""

    name: str
    dtype: Optional[str]
    shape: Optional[Tuple[Union[int, str, None], ...]]


@dataclass(frozen=True)
class NodePlacement:
    """One node's device (None for a node computing a constant, copied where read) and why."""

    name: str
    op: str
    device: Optional[str]
    reason: str


@dataclass(frozen=True)
class Query:
    """What :meth:`Model.query` answers, as ``cleave query --json`` does."""

    devices: List[str]
    nodes: List[NodePlacement]
    counts: Dict[str, int]
    constant_nodes: int
    coverage: List[Dict[str, Any]]

    def device_of(self, node: str) -> Optional[str]:
        """The device of the node named `node`."""
        for n in self.nodes:
            if n.name == node:
                return n.device
        raise KeyError(node)


@dataclass(frozen=True)
class Part:
    """One part of a plan, in dependency order (``index`` from 1, as the file names count)."""

    index: int
    backend: str
    nodes: List[str]
    constant_nodes: List[str]
    inputs: List[str]
    outputs: List[str]
    weight_bytes: int


@dataclass
class Verification:
    """What :func:`verify` found: per tensor, the largest absolute difference and whether it
    is within tolerance."""

    passed: bool
    reference: str
    tensors: List[Dict[str, Any]] = field(default_factory=list)


def builtin_devices() -> List[str]:
    """The device profiles cleave knows without a profile file (``cpu``, ``nnapi``, ...)."""
    return list(_cleave.builtin_devices())


@contextlib.contextmanager
def _argument(what: str) -> Iterator[None]:
    """A wrong type or value met while converting `what` becomes an :class:`ArgumentError`."""
    try:
        yield
    except (TypeError, ValueError, AttributeError) as e:
        raise ArgumentError(f"{what}: {e}") from None


def _dims(shape: Optional[Mapping[str, Sequence[int]]]) -> Optional[Dict[str, List[int]]]:
    if shape is None:
        return None
    with _argument("shape= takes {input name: (dim, ...)}"):
        return {str(k): [int(d) for d in v] for k, v in shape.items()}


def load(
    model: Any,
    shape: Optional[Mapping[str, Sequence[int]]] = None,
    dim: Optional[Mapping[str, int]] = None,
) -> "Model":
    """Loads a model: a path, the file's ``bytes``, or an ``onnx.ModelProto``.

    ONNX, TFLite and circle are recognised by their content. ``shape`` fixes inputs' shapes
    (``{"x": (1, 3, 224, 224)}``) and ``dim`` named dims (``{"batch": 1}``) before anything
    reads the model, as ``--shape`` and ``--dim`` do.

    >>> m = cleave.load("examples/tiny_cnn.onnx", shape={"input": (1, 3, 16, 16)})
    >>> m.format, m.inputs[0].shape
    ('onnx', (1, 3, 16, 16))

    Raises :class:`InvalidModelError` for a model cleave cannot read, naming the cause.
    """
    with _argument("dim= takes {dim name: int}"):
        dims = {str(k): int(v) for k, v in dim.items()} if dim is not None else None
    # A model given as bytes is named by what it was in messages, never by the private
    # temporary file cleave writes it to.
    if isinstance(model, (bytes, bytearray, memoryview)):
        inner = _cleave.load_bytes(bytes(model), "<bytes>", _dims(shape), dims)
    elif hasattr(model, "SerializeToString"):
        # An onnx.ModelProto (or any protobuf message of a model): its bytes, no file to manage.
        graph = str(getattr(getattr(model, "graph", None), "name", "") or "")
        name = f"<ModelProto {graph[:60]!r}>" if graph else "<ModelProto>"
        inner = _cleave.load_bytes(model.SerializeToString(), name, _dims(shape), dims)
    elif isinstance(model, (str, os.PathLike)):
        inner = _cleave.load_path(os.fspath(model), _dims(shape), dims)
    else:
        raise ArgumentError(
            f"load() takes a path, bytes or an onnx.ModelProto, not {type(model).__name__}"
        )
    return Model(inner)


def _rule_table(rules: Mapping[str, Any]) -> Dict[str, Any]:
    """ONE's rules from a dict: ``{"backends": [...], "default": ..., "comply": ...,
    "OPCODE": {op: device}, "OPNAME": {node: device}}``, as the extension takes them."""
    known = {"backends", "default", "comply", "OPCODE", "OPNAME"}
    unknown = set(rules) - known
    if unknown:
        raise ArgumentError(f"rules: unknown keys {sorted(unknown)} (known: {sorted(known)})")
    backends = rules.get("backends") or []
    if isinstance(backends, str):
        backends = [b for b in backends.split(",") if b]
    table: Dict[str, Any] = {
        "backends": [str(b) for b in backends],
        "default": None if rules.get("default") is None else str(rules["default"]),
        "comply": None if rules.get("comply") is None else str(rules["comply"]),
    }
    for section in ("OPCODE", "OPNAME"):
        with _argument(f"rules[{section!r}] takes {{name: device}}"):
            table[section] = [(str(k).strip(), str(v).strip())
                              for k, v in (rules.get(section) or {}).items()]
    return table


def _budget(device: Any, v: Any) -> Union[int, str]:
    """A memory budget as the extension takes it: bytes as an int above 0, or text with a
    unit (``"16GiB"``), which Rust reads."""
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ArgumentError(f"memory[{device!r}]={v!r}: give bytes as an int, or a size like '16GiB'")
    if isinstance(v, int) and not 0 < v < 2**64:
        raise ArgumentError(f"memory[{device!r}]={v}: give a size above 0 and below 2**64 bytes")
    return v


def _request(
    devices: Optional[Iterable[str]],
    rules: Optional[Rules],
    default: Optional[str],
    profiles: Optional[Iterable[PathLike]],
    optimize: Optional[str],
    objective: str,
    costs: Optional[PathLike],
    margin: float,
    no_constraints: bool,
    allow_disconnected: bool,
    state: Optional[Mapping[str, str]] = None,
) -> Dict[str, Any]:
    """The keyword arguments query and partition share, as the extension takes them: a dict
    of rules goes as a table, which messages call ``<rules dict>``."""
    if isinstance(devices, str):
        devices = [d for d in devices.split(",") if d]
    table = _rule_table(rules) if isinstance(rules, Mapping) else None
    with _argument("a device, rule, profile or cost argument"):
        path = os.fspath(rules) if rules is not None and not isinstance(rules, Mapping) else None
        return {
            "devices": [os.fspath(d) for d in (devices or [])],
            "rules": path,
            "rules_table": table,
            "default": default,
            "profiles": _paths(profiles),
            "optimize": optimize,
            "objective": objective,
            "costs": os.fspath(costs) if costs is not None else None,
            "margin": float(margin),
            "no_constraints": bool(no_constraints),
            "allow_disconnected": bool(allow_disconnected),
            "state": [(str(i), str(o)) for i, o in (state or {}).items()],
        }


def _paths(items: Optional[Iterable[PathLike]]) -> List[str]:
    return [os.fspath(p) for p in (items or [])]


class Model:
    """A model loaded by cleave (see :func:`load`)."""

    def __init__(self, inner: Any) -> None:
        self._m = inner

    def __repr__(self) -> str:
        return f"<cleave.Model {self.format} {self.path!r}: {self.node_count} nodes>"

    @property
    def path(self) -> str:
        """The model file (a private copy when the model was given as bytes)."""
        return str(self._m.path)

    @property
    def format(self) -> str:
        """``"onnx"``, ``"tflite"`` or ``"circle"``."""
        return str(self._m.format)

    @property
    def inputs(self) -> List[TensorInfo]:
        return [TensorInfo(n, t, tuple(s) if s is not None else None) for n, t, s in self._m.inputs]

    @property
    def outputs(self) -> List[TensorInfo]:
        return [TensorInfo(n, t, tuple(s) if s is not None else None) for n, t, s in self._m.outputs]

    @property
    def node_count(self) -> int:
        return int(self._m.node_count)

    @property
    def op_counts(self) -> Dict[str, int]:
        """Nodes per operator type."""
        return dict(self._m.op_counts)

    @property
    def state(self) -> Dict[str, str]:
        """The decoder state pairs the names show (``past_key_values.N.key`` ->
        ``present.N.key``): each input that takes an output's value on the next step.
        ``partition(state=...)`` declares others."""
        return dict(self._m.state)

    def query(
        self,
        devices: Optional[Iterable[str]] = None,
        *,
        rules: Optional[Rules] = None,
        default: Optional[str] = None,
        profiles: Optional[Iterable[PathLike]] = None,
        optimize: Optional[str] = None,
        objective: str = "fewest",
        costs: Optional[PathLike] = None,
        margin: float = 0.10,
        no_constraints: bool = False,
        allow_disconnected: bool = False,
    ) -> Query:
        """Which device runs each node, and why (OpenVINO's ``query_model``).

        ``devices`` is a priority list (``["nnapi", "cpu"]``, like ``HETERO:NPU,CPU``): each
        node goes to the first whose profile runs it; ``"ov:GPU"`` is an installed OpenVINO
        device, which runs what OpenVINO's own ``query_model`` says (needs ``openvino``).
        ``rules`` is a ONE ``.part`` file or a dict of its sections. The other arguments are
        ``cleave query``'s flags.

        >>> m = cleave.load("examples/tiny_cnn.onnx")
        >>> m.query(["nnapi", "cpu"]).counts   # NNAPI wants static shapes: all on the CPU
        {'cpu': 11, 'nnapi': 0}
        >>> m = cleave.load("examples/tiny_cnn.onnx", shape={"input": (1, 3, 16, 16)})
        >>> m.query(["nnapi", "cpu"]).counts
        {'cpu': 0, 'nnapi': 11}
        """
        import json

        args = _request(devices, rules, default, profiles, optimize, objective, costs, margin,
                        no_constraints, allow_disconnected)
        text = self._m.query_json(args)
        d = json.loads(text)
        return Query(
            devices=d["devices"],
            nodes=[NodePlacement(**n) for n in d["nodes"]],
            counts=d["counts"],
            constant_nodes=d["constant_nodes"],
            coverage=d["coverage"],
        )

    def partition(
        self,
        devices: Optional[Iterable[str]] = None,
        *,
        rules: Optional[Rules] = None,
        default: Optional[str] = None,
        profiles: Optional[Iterable[PathLike]] = None,
        objective: str = "fewest",
        costs: Optional[PathLike] = None,
        margin: float = 0.10,
        optimize: Optional[str] = None,
        stages: Optional[int] = None,
        memory: Optional[Mapping[str, Union[str, int]]] = None,
        allow_disconnected: bool = False,
        algorithm: str = "default",
        budget_s: float = 10.0,
        no_constraints: bool = False,
        state: Optional[Mapping[str, str]] = None,
        context: Optional[int] = None,
        batch: int = 1,
    ) -> "Plan":
        """Cuts the model into valid single-device parts, as ``cleave partition`` does.

        ``objective="fewest"`` gives the fewest parts (``"parts"``, its old name, is accepted);
        ``"latency"`` places by predicted latency,
        from ``costs`` (a file from ``cleave measure``) where it has a device, else the
        device profile's ``[cost]``, else cleave's built-in estimate for the device (a
        :class:`UserWarning` says so); :attr:`Plan.prediction` holds the figures.
        ``stages=N`` cuts N pipeline stages over ``devices`` instead, each within its
        ``memory`` budget (``{"gpu0": "16GiB"}``, or bytes as an int). Nothing is written until
        :meth:`Plan.save`. ``state`` declares decoder state pairs, ``{input: output}``
        (``cleave partition --state IN=OUT``), beyond those named as exporters name them
        (``past_key_values.N.key`` -> ``present.N.key``); :meth:`Runner.generate` feeds them back.
        ``context=T`` (with ``stages``, and ``batch=B``) counts a decoder's stages at T tokens
        of context: weights plus KV cache, per-token work (``--context``, ``--batch``).

        >>> plan = cleave.load("examples/tiny_cnn.onnx").partition(rules="examples/tiny_cnn.part")
        >>> [p.backend for p in plan.parts]
        ['npu', 'cpu', 'npu', 'cpu']
        """
        with _argument("memory= takes {device: budget}, budget_s= a number"):
            mem = [(str(k), _budget(k, v)) for k, v in (memory or {}).items()]
            budget = float(budget_s)
        with _argument("state= takes {input: output}, context= and batch= integers"):
            pairs = dict(state or {})
            ctx = int(context) if context is not None else None
            nbatch = int(batch)
            if (ctx is not None and ctx < 0) or nbatch < 0:
                raise ValueError("negative")
        args = _request(devices, rules, default, profiles, optimize, objective, costs, margin,
                        no_constraints, allow_disconnected, pairs)
        inner = self._m.partition(args, stages, mem, algorithm, budget, ctx, nbatch)
        plan = Plan(inner, self)
        estimated = (plan.prediction or {}).get("estimated")
        if objective == "latency" and estimated:
            warnings.warn(
                f"the latency figures for {', '.join(estimated)} are cleave's built-in estimates, "
                "not measurements: predictions may be off by 2x or more; cleave measure on the "
                "target gives costs=", UserWarning, stacklevel=2)
        return plan

    def run(
        self,
        feeds: Feeds,
        outputs: Optional[Sequence[str]] = None,
        engine: Optional[str] = None,
    ) -> Dict[str, np.ndarray]:
        """Runs the whole model once; returns ``outputs`` (the graph's outputs by default; any
        tensor of the graph may be named). ``engine``: ``"tract"``, ``"onnxruntime"``,
        ``"litert"``, ``"openvino"`` (``"openvino:GPU"`` for another OpenVINO device) or
        ``"onert"`` (``"onert:ruy;cpu"`` for other backends) (default: LiteRT for TFLite,
        onert for circle, tract for ONNX)."""
        if engine is not None:
            _engines.require(engine)
        return dict(self._m.run(_feeds(feeds), list(outputs) if outputs is not None else None, engine))

    def session(self, outputs: Optional[Sequence[str]] = None, engine: Optional[str] = None) -> "Session":
        """The whole model loaded once on ``engine``, to run again and again: state the model
        keeps (TFLite resource variables) carries from one run to the next, as it does in a
        :class:`Runner`'s parts. ``outputs`` and ``engine`` as in :meth:`run`."""
        if engine is not None:
            _engines.require(engine)
        return Session(self._m.session(list(outputs) if outputs is not None else None, engine))

    def random_inputs(self, seed: int = 0) -> Dict[str, np.ndarray]:
        """A random array for every input (needs static shapes: fix them with ``shape=``)."""
        rng = np.random.default_rng(seed)
        feeds: Dict[str, np.ndarray] = {}
        for t in self.inputs:
            if t.shape is None or any(not isinstance(d, int) for d in t.shape):
                raise ArgumentError(
                    f"input '{t.name}' has a dynamic shape {t.shape}: load the model with shape={{'{t.name}': (...)}}",
                    self.path,
                )
            dtype = np.dtype(t.dtype or "float32")
            dims = tuple(int(d) for d in t.shape)  # type: ignore[arg-type]
            if dtype.kind == "f":
                feeds[t.name] = rng.standard_normal(dims).astype(dtype)
            elif dtype.kind == "b":
                feeds[t.name] = rng.integers(0, 2, dims).astype(bool)
            else:
                feeds[t.name] = rng.integers(0, 8, dims).astype(dtype)
        return feeds


def _feeds(feeds: Feeds) -> Dict[str, np.ndarray]:
    if not isinstance(feeds, Mapping):
        raise ArgumentError(f"feeds must be a dict of name -> numpy array, not {type(feeds).__name__}")
    out: Dict[str, np.ndarray] = {}
    for k, v in feeds.items():
        if not isinstance(k, str):
            raise ArgumentError(f"feeds: an input's name is a str, not {type(k).__name__} ({k!r})")
        try:
            # Arrays that already are C-contiguous pass as they are (no copy here).
            a = np.ascontiguousarray(v)
        except (TypeError, ValueError) as e:
            raise ArgumentError(f"input '{k}': not an array numpy can make ({e})") from None
        if a.dtype.kind in "biufc" and not a.dtype.isnative:
            # The same numbers in this machine's byte order (engines read native order only).
            a = a.astype(a.dtype.newbyteorder("="))
        out[k] = a
    return out


class Plan:
    """A validated partition: single-device, connected, no cycle between parts."""

    def __init__(self, inner: Any, model: Model) -> None:
        self._p = inner
        self.model = model
        self.parts: List[Part] = [Part(**d) for d in inner.parts_info()]

    def __repr__(self) -> str:
        per: Dict[str, int] = {}
        for p in self.parts:
            per[p.backend] = per.get(p.backend, 0) + 1
        return f"<cleave.Plan {len(self.parts)} parts: " + ", ".join(f"{n} on {d}" for d, n in per.items()) + ">"

    @property
    def devices(self) -> List[str]:
        return list(self._p.devices)

    @property
    def warnings(self) -> List[str]:
        """The assignment's warnings (fused groups that had to be dissolved)."""
        return list(self._p.warnings)

    @property
    def stages(self) -> List[str]:
        """The stage table ``cleave partition --stages`` prints, when ``stages=`` made the
        plan: a header, one row per stage (device, nodes, weights, activation peak, memory,
        budget, time, bytes in and out), then the bottleneck. Empty otherwise."""
        return list(self._p.stage_lines)

    @property
    def prediction(self) -> Optional[Dict[str, Any]]:
        """The predicted latency, when ``objective="latency"`` or ``costs`` gave figures:
        ``total_ms``, ``part_ms`` (per part), ``compared`` (``{"capability": (ms, parts),
        "all on cpu": ...}``), and the devices whose figures a profile ``declared``, of
        which ``estimated`` are cleave's built-in estimates. None otherwise, and with
        ``stages=``."""
        p = self._p.prediction
        return None if p is None else dict(p)

    def save(self, folder: PathLike, external_data: str = "inline") -> str:
        """Writes ``stem.00001_<backend>.<ext>`` per part and ONE's ``stem.conn.json`` /
        ``stem.conn.ini`` into `folder`, as ``cleave partition -o folder``; returns the
        ``.conn.json`` path. ``external_data="shared"`` puts large weights in one file."""
        with _argument("save() takes a folder path"):
            folder = os.fspath(folder)
        return str(self._p.save(folder, external_data))

    def part_bytes(self) -> List[bytes]:
        """Each part's file contents, in order (weights inline)."""
        return [bytes(b) for _, b in self._p.part_files()]

    def to_onnx(self) -> List[Any]:
        """Each part as an ``onnx.ModelProto`` (needs the onnx package; ONNX models only)."""
        if self.model.format != "onnx":
            raise ArgumentError(f"to_onnx(): the model is {self.model.format}; use part_bytes()")
        try:
            import onnx
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ArgumentError("to_onnx() needs the onnx package: pip install onnx") from e
        return [onnx.load_from_string(b) for b in self.part_bytes()]

    def report(self, path: Optional[PathLike] = None) -> str:
        """Writes the HTML view of the partition (and its markdown, DOT and, unless
        ``optimize=`` rewrote the model, Model Explorer overlay beside it); returns the HTML
        file, copied to `path` when given."""
        # The copy is the CLI's atomic writer: a random temporary name created exclusively
        # beside `path`, renamed over it (a link planted at `path` is replaced, not followed).
        with _argument("report() takes a file path"):
            dest = os.fspath(path) if path is not None else None
        return str(self._p.report(dest))

    def runner(self, engines: Optional[Mapping[str, str]] = None) -> "Runner":
        """Loads every part into an engine: ``engines`` maps a backend to ``"tract"``,
        ``"onnxruntime"``, ``"litert"``, ``"openvino[:DEVICE]"`` or ``"onert[:BACKENDS]"``
        (default: OpenVINO for an ``ov-DEVICE`` backend, LiteRT for TFLite parts, onert for
        circle parts, tract for ONNX)."""
        with _argument("engines= takes {backend: engine}"):
            pairs = [(str(b), str(e)) for b, e in (engines or {}).items()]
        for _, e in pairs:
            _engines.require(e)
        return Runner(self._p.runner(pairs))


class Runner:
    """The parts of a plan loaded into their engines."""

    def __init__(self, inner: Any) -> None:
        self._r = inner
        # A part whose default engine could not load it runs on another; said as `cleave run` says it.
        for note in self._r.notes:
            warnings.warn(note, UserWarning, stacklevel=3)

    @property
    def outputs(self) -> List[str]:
        """The model's outputs."""
        return list(self._r.outputs)

    @property
    def boundaries(self) -> List[str]:
        """The tensors one part hands another."""
        return list(self._r.boundaries)

    def run(self, feeds: Feeds, boundaries: bool = False) -> Dict[str, np.ndarray]:
        """Runs every part once; returns the model's outputs by name, plus every tensor between
        parts when ``boundaries=True``. Outputs own their memory (no copy is made of them)."""
        return dict(self._r.run(_feeds(feeds), bool(boundaries)))

    def generate(
        self,
        prompt: Union[str, Iterable[int]],
        max_new_tokens: int = 16,
        *,
        stop: Iterable[int] = (),
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        state: Optional[Mapping[str, str]] = None,
        tokenizer: Optional[PathLike] = None,
    ) -> "Generator":
        """Generates tokens with a decoder's parts, as ``cleave generate`` does: the prompt's
        token ids in one step, then one token per step, greedy at ``temperature=0`` (else
        sampled, within ``top_k`` and ``top_p``, repeatable with ``seed``), ending at
        ``max_new_tokens`` or after a token of ``stop``. Each part keeps its layers' KV cache
        between steps; ``state`` declares pairs the plan does not know. A ``prompt`` given as
        text is encoded by ``tokenizer`` (a ``tokenizer.json``; default: the one beside the
        model), and :meth:`Generator.text` decodes the tokens. Iterate the result for the
        tokens as they come; its :meth:`Generator.stats` says what the steps took."""
        with _argument("prompt= takes token ids, max_new_tokens=, top_k= and seed= integers, "
                       "temperature= and top_p= numbers, state= {input: output}"):
            text = prompt if isinstance(prompt, str) else None
            ids = [] if isinstance(prompt, str) else [int(t) for t in prompt]
            tok = os.fspath(tokenizer) if tokenizer is not None else None
            stops = [int(t) for t in stop]
            pairs = [(str(i), str(o)) for i, o in (state or {}).items()]
            n, k, s = int(max_new_tokens), int(top_k), int(seed)
            t, p = float(temperature), float(top_p)
            if n < 0 or k < 0 or s < 0:
                raise ValueError("negative")
        return Generator(self._r.generate(ids, n, stops, t, k, p, s, pairs, text, tok))


class Generator:
    """A generation in progress (:meth:`Runner.generate`): an iterator of token ids."""

    def __init__(self, inner: Any) -> None:
        self._g = inner

    def __iter__(self) -> Iterator[int]:
        return self

    def __next__(self) -> int:
        token = self._g.__next__()
        if token is None:
            raise StopIteration
        return int(token)

    def text(self) -> Optional[str]:
        """The tokens so far as text, where the prompt was text or a tokenizer was given."""
        got = self._g.text()
        return None if got is None else str(got)

    def stats(self) -> Dict[str, Any]:
        """``prefill_ms``, ``per_token_ms`` (one per decode step), ``hop_bytes`` (bytes
        between parts per decode step) and ``state_bytes`` (the caches the parts hold)."""
        return dict(self._g.stats())


class Session:
    """The whole model loaded in one engine (:meth:`Model.session`)."""

    def __init__(self, inner: Any) -> None:
        self._s = inner

    @property
    def engine(self) -> str:
        """The engine the model runs on (``"litert"``, ``"onert:cpu"``, ``"openvino:CPU"``)."""
        return str(self._s.engine)

    def run(self, feeds: Feeds) -> Dict[str, np.ndarray]:
        """Runs the model once; returns the tensors the session was opened for."""
        return dict(self._s.run(_feeds(feeds)))


def verify(
    model: Model,
    plan: Plan,
    feeds: Optional[Feeds] = None,
    *,
    seed: int = 0,
    boundaries: bool = True,
    engines: Optional[Mapping[str, str]] = None,
    reference: Optional[str] = None,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    invokes: int = 1,
) -> Verification:
    """Runs the parts and the whole model on the same inputs (random ones from `seed` unless
    `feeds`) and compares the outputs and, with ``boundaries``, every tensor between parts,
    as ``cleave verify --boundaries --rtol --atol`` does. With ``invokes=N`` both run N times
    in a row on the same sessions, so a stateful model's state carries over, and every invoke
    is compared (rows ``"NAME @K"``, as ``cleave verify --invokes N`` prints them; random
    inputs are then seeded ``seed``, ``seed + 1``, ...).

    >>> model = cleave.load("examples/tiny_cnn.onnx", shape={"input": (1, 3, 16, 16)})
    >>> plan = model.partition(rules="examples/tiny_cnn.part")
    >>> v = cleave.verify(model, plan)
    >>> v.passed, [t["kind"] for t in v.tensors]
    (True, ['output', 'boundary', 'boundary', 'boundary', 'boundary'])

    Raises :class:`ArgumentError` when the plan does not give the model's outputs (a plan of
    another model), naming those missing and extra, and :class:`UnsupportedError` when no
    tensor could be compared, as ``cleave verify`` refuses both.
    """
    if invokes < 1:
        raise ArgumentError(f"invokes={invokes}: run at least once")
    runner = plan.runner(engines)
    # The same refusals as `cleave verify` (cleave-runtime's `verify::check_outputs` and
    # `Report::verdict`): a plan that does not give the model's outputs, all of them, or a
    # comparison of nothing, proves nothing about the model.
    _check_outputs(model, [t.name for t in model.outputs], runner.outputs)
    names = runner.outputs + (runner.boundaries if boundaries else [])
    whole = model.session(outputs=names, engine=reference)
    result = Verification(passed=True, reference=reference or whole.engine)
    for k in range(1, invokes + 1):
        # Random inputs seeded seed, seed+1, ... as `cleave verify --invokes` draws them.
        inputs = feeds if feeds is not None else model.random_inputs(seed + k - 1)
        got = runner.run(inputs, boundaries=boundaries)
        want = whole.run(inputs)
        _compare(result, runner.outputs, names, got, want, f" @{k}" if invokes > 1 else "", rtol, atol)
    if not result.tensors:
        raise UnsupportedError(
            "nothing was compared: no output of the model is a tensor that both the parts "
            "and the whole model give",
            model.path,
        )
    return result


def _check_outputs(model: Model, model_outputs: List[str], plan_outputs: List[str]) -> None:
    missing = [o for o in model_outputs if o not in plan_outputs]
    extra = [o for o in plan_outputs if o not in model_outputs]
    if not missing and not extra:
        return
    why = []
    if missing:
        why.append("lacks the model's outputs " + ", ".join(f"'{n}'" for n in missing))
    if extra:
        why.append("gives outputs the model does not: " + ", ".join(f"'{n}'" for n in extra))
    raise ArgumentError(f"the plan's outputs are not the model's: it {' and '.join(why)}", model.path)


def _compare(
    result: Verification,
    outputs: List[str],
    names: List[str],
    got: Dict[str, np.ndarray],
    want: Dict[str, np.ndarray],
    suffix: str,
    rtol: float,
    atol: float,
) -> None:
    for name in names:
        if name not in want or name not in got:
            continue
        a, b = got[name], want[name]
        if a.shape != b.shape:
            ok, diff = False, float("inf")
        elif a.dtype.kind in "fc":
            # Equal infinities differ by nothing (inf - inf would say nan).
            with np.errstate(invalid="ignore"):
                gap = np.where(a == b, 0, np.abs(a - b))
            diff = float(np.max(gap)) if a.size else 0.0
            ok = bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))
        else:
            diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
            ok = bool(np.array_equal(a, b))
        result.tensors.append(
            {"tensor": name + suffix, "kind": "output" if name in outputs else "boundary",
             "max_abs": diff, "ok": ok}
        )
        result.passed = result.passed and ok
