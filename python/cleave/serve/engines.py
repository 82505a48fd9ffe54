"""The engines a part runs on, each behind one interface (``input_specs``, ``run_options``,
``run``): ONNX Runtime, LiteRT, OpenVINO and onert, and ``open_part``, which picks one."""

import io
import os
import tempfile

# ONNX Runtime's type names of the tensors numpy can hold.
_ORT_DTYPES = {
    "tensor(float)": "float32",
    "tensor(double)": "float64",
    "tensor(float16)": "float16",
    "tensor(int8)": "int8",
    "tensor(int16)": "int16",
    "tensor(int32)": "int32",
    "tensor(int64)": "int64",
    "tensor(uint8)": "uint8",
    "tensor(uint16)": "uint16",
    "tensor(uint32)": "uint32",
    "tensor(uint64)": "uint64",
    "tensor(bool)": "bool",
}


class _Cancel:
    """RunOptions for an engine without ONNX Runtime's: setting ``terminate`` cancels the
    running request where the engine can (OpenVINO), and is a no-op where it cannot (LiteRT)."""

    def __init__(self):
        self.request = None

    def __setattr__(self, name, value):
        if name == "terminate" and value and self.request is not None:
            self.request.cancel()
        object.__setattr__(self, name, value)


class OrtPart:
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
                self.note = (
                    f"backend {backend} asks for a GPU, and this onnxruntime has no CUDAExecutionProvider "
                    "(pip install onnxruntime-gpu): it runs on the CPU"
                )
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


class LiteRtPart:
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


class OpenVinoPart:
    """A part compiled by OpenVINO for one of its devices, run as ONNX Runtime's session is:
    ``run(outputs, feeds, run_options)``, where cancelling ``run_options`` stops the request."""

    def __init__(self, source, device, threads):

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


class OnertPart:
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
        # With outputs onert allocates (below), its linear executor frees a part output that
        # another op of the part reads and hands back the reused buffer (onert 0.1.0;
        # docs/engine-disagreements.md); its dataflow executor keeps outputs whole.
        os.environ["EXECUTOR"] = "Dataflow"
        self.session = infer.nnfw_session(path, backends)
        n_in, n_out = self.session.input_size(), self.session.output_size()
        if (n_in, n_out) != (len(self.input_names), len(self.output_names)):
            raise ValueError(
                f"onert sees {n_in} inputs and {n_out} outputs, the file's main subgraph has "
                f"{len(self.input_names)} and {len(self.output_names)}"
            )
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
        return OpenVinoPart(source, engine.split(":", 1)[1] if ":" in engine else "CPU", threads)
    if fmt == "tflite":
        return LiteRtPart(source, threads)
    if fmt == "circle":
        try:
            import onert  # noqa: F401
        except ImportError:
            raise ValueError(
                f"{spec['deployment']}: a circle part, and this Python has no onert package to run it: "
                "pip install onert (or serve it with `cleave serve`, which converts it to TFLite)"
            ) from None
        return OnertPart(source, engine.split(":", 1)[1] if engine.startswith("onert:") else "cpu")
    if fmt == "onnx":
        return OrtPart(source, spec["backend"], threads)
    raise ValueError(
        f"{spec['deployment']}: no engine serves {fmt} parts (ONNX Runtime and OpenVINO take ONNX, LiteRT takes "
        "TFLite, onert circle)"
    )
