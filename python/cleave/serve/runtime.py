"""Parts on cleave's own runtime, through the extension (``cleave._cleave``): the engines, the
registry that picks one for each part, and the errors are those of ``cleave run``. Every Ray
node that runs a part needs the ``cleave-nn`` wheel (``pip install 'cleave-nn[ray]'``)."""

import sys

# At the top, never inside a function: Ray ships this package to other nodes by value, where
# no package of its name can be imported.
from .actors import node_threads

INSTALL = "pip install 'cleave-nn[ray]'"


def extension():
    """The extension module, or a RuntimeError naming the install this Python lacks."""
    try:
        from cleave import _cleave
    except ImportError as e:
        raise RuntimeError(
            f"{sys.executable} has no cleave package to run parts with ({e}): {INSTALL} on every Ray node"
        ) from None
    return _cleave


def load_model(source, name="<part>"):
    """A model from a path or its bytes (`name` is what messages call bytes)."""
    ext = extension()
    if isinstance(source, (bytes, bytearray, memoryview)):
        return ext.load_bytes(bytes(source), name)
    return ext.load_path(source)


class _Cancel:
    """One request's run options: setting ``terminate`` once the request is given up on stops
    its run where the engine can (ONNX Runtime), and keeps it from starting where it has not;
    an engine that cannot stop a started run finishes it, unawaited. The token is the
    request's own, so no other request's run on the same part is touched."""

    def __init__(self):
        self._token = extension().Cancel()

    @property
    def terminate(self):
        return self._token.cancelled

    @terminate.setter
    def terminate(self, value):
        if value:
            self._token.cancel()

    def run(self, part, feeds, names):
        return part.run(feeds, names, self._token)


class RuntimePart:
    """A part in the engine cleave's registry picks for it (``engine`` as opened, ``note``
    where it is not the first choice), run as ``run(outputs, feeds, run_options)``."""

    def __init__(self, spec, source):
        # 0 or none given: the part's share of its node's cores.
        threads = int(spec.get("threads") or 0) or node_threads(spec.get("share") or 1)
        self.threads = threads
        model = load_model(source, spec.get("deployment") or "<part>")
        self.part = extension().open_part(model, spec.get("backend") or "cpu", spec.get("engine"), threads)
        self.engine = self.part.engine
        self.note = self.part.note
        self.outputs = list(self.part.outputs)

    def input_specs(self):
        """{name: [numpy dtype name or None, dims with None where free, or None where the
        file does not give the rank]}."""
        return {name: [dtype, list(dims) if dims is not None else None] for name, dtype, dims in self.part.inputs}

    def run_options(self):
        return _Cancel()

    def run(self, outputs, feeds, run_options=None):
        names = list(self.outputs if outputs is None else outputs)
        got = (run_options or _Cancel()).run(self.part, feeds, names)
        return [got[n] for n in names]


def open_part(spec, source):
    """The part of `spec` (a served partition's part), from its file or its bytes."""
    return RuntimePart(spec, source)


def model_inputs(path):
    """[(name, numpy dtype name or None, dims with None where free)] of a model file's inputs."""
    return [
        (name, dtype, [d if isinstance(d, int) else None for d in (dims or [])])
        for name, dtype, dims in load_model(path).inputs
    ]


def reference_run(path, feeds, names):
    """The whole model at `path` run once on its format's default engine, every tensor in
    `names` (outputs or any tensor of the graph) read out."""
    return dict(load_model(path).run(feeds, list(names), None))


def whole_model(path, threads):
    """The whole model at `path` as served (ONNX Runtime first for ONNX) on `threads`
    threads: its engine's name and a run that answers every output."""
    part = open_part({"backend": "cpu", "threads": threads}, path)
    return part.engine.split(":")[0], lambda feeds: part.run(None, feeds)
