"""What check_tflite_parts.py, tflite_oracle.py and tflite_corpus.py share: how LiteRT is
set up to be a trustworthy reference, how random inputs are made, and how a .tflite or .circle
flatbuffer is read without running it.

LiteRT quirks this module exists for (ai-edge-litert 2.3.0):
- `Interpreter(..., experimental_preserve_all_tensors=True)` still applies the default XNNPACK
  delegate with the default (AUTO) op resolver, whatever its docstring says: the delegate runs
  most of the graph itself, so LiteRT's copies of the intermediate tensors inside it are stale
  (on face_detection_back, 106 of 423 tensors differ from a run without it). Every interpreter
  here uses BUILTIN_WITHOUT_DEFAULT_DELEGATES, LiteRT's own kernels: then the preserved tensors
  are bit-identical to the same tensors made graph outputs (checked on all seven face models).
- It also lists the delegate's nodes (op name "DELEGATE") among the ops, so op counts are
  only the model's own without the delegate.
- LiteRT refuses a flatbuffer whose file identifier is not "TFL3" ("not a valid Flatbuffer
  buffer"); a circle file (ONE's format, the TFLite schema plus extensions) carries "CIR0".
  `load_bytes` gives LiteRT a circle file with the identifier swapped, which runs the circle
  files that use only TFLite's builtins (what a partition of a .tflite model holds).
"""
import pathlib
import re
import sys
import warnings

import numpy as np

# LiteRT warns on every preserve_all_tensors interpreter that it is meant for debugging: that
# is what it is for here.
warnings.filterwarnings("ignore", message=".*experimental_preserve_all_tensors.*")

from ai_edge_litert import schema_py_generated as schema  # noqa: E402
from ai_edge_litert.interpreter import Interpreter, OpResolverType  # noqa: E402

TFLITE_ID = b"TFL3"
CIRCLE_ID = b"CIR0"


def load_bytes(path):
    """The model's bytes, a circle identifier swapped for TFLite's so LiteRT accepts them."""
    data = bytearray(pathlib.Path(path).read_bytes())
    if data[4:8] == CIRCLE_ID:
        data[4:8] = TFLITE_ID
    elif data[4:8] != TFLITE_ID:
        raise ValueError(f"{path}: not a TFLite or circle flatbuffer (identifier {bytes(data[4:8])!r})")
    return bytes(data)


def interpreter(path=None, preserve=False, content=None):
    """A LiteRT interpreter on LiteRT's builtin kernels, no default delegate (see above), of
    the model at path or of the model bytes in content."""
    return Interpreter(model_content=load_bytes(path) if content is None else bytes(content),
                       experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
                       experimental_preserve_all_tensors=preserve)


def quant(detail):
    """A tensor's quantization as comparable lists: (scales, zero points, quantized dim)."""
    q = detail["quantization_parameters"]
    return ([float(s) for s in q["scales"]], [int(z) for z in q["zero_points"]],
            int(q["quantized_dimension"]))


def is_quantized(detail):
    return len(detail["quantization_parameters"]["scales"]) > 0


def parse_shapes(items):
    """--shape NAME=1,3,224,224 flags as a dict."""
    shapes = {}
    for s in items:
        name, _, dims = s.partition("=")
        if not dims:
            sys.exit(f"error: --shape {s}: expected NAME=D1,D2,...")
        shapes[name] = [int(d) for d in dims.split(",")]
    return shapes


def concrete_shape(detail, shapes):
    """A shape to run with: the one given by --shape, else the signature with -1 as 1."""
    if detail["name"] in shapes:
        return list(shapes[detail["name"]])
    sig = detail["shape_signature"] if len(detail["shape_signature"]) else detail["shape"]
    return [int(d) if d >= 0 else 1 for d in sig]


def random_input(detail, shape, rng):
    """Seeded data of the input's dtype in a range the model can take: floats from a normal
    distribution; quantized 8/16-bit integers over their full range (their scale maps it to
    the real range the model was calibrated for); other integers in [0, 4), small enough to be
    valid indices, sizes or axes; bools 0/1."""
    dtype = np.dtype(detail["dtype"])
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if dtype.kind in "iu":
        if is_quantized(detail):
            info = np.iinfo(dtype)
            return rng.integers(info.min, int(info.max) + 1, shape, dtype=np.int64).astype(dtype)
        return rng.integers(0, 4, shape).astype(dtype)
    sys.exit(f"error: input {detail['name']} has dtype {dtype}, which this check does not generate")


def random_inputs(interp, rng, shapes):
    """Random data for every input of the interpreter, by name, in input order."""
    return {d["name"]: random_input(d, concrete_shape(d, shapes), rng)
            for d in interp.get_input_details()}


def feed(interp, values):
    """Set every input of the interpreter from values by name, resizing dynamic or differing
    inputs to the value's shape first; allocates the tensors."""
    details = interp.get_input_details()
    resized = False
    for d in details:
        v = values[d["name"]]
        if list(d["shape"]) != list(v.shape):
            interp.resize_tensor_input(d["index"], list(v.shape))
            resized = True
    interp.allocate_tensors()
    if resized:
        details = interp.get_input_details()
    for d in details:
        interp.set_tensor(d["index"], values[d["name"]])


def sanitize(name):
    """A tensor name as a file name: anything but letters, digits, '.', '-', '_' becomes '_'."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:100]


class Flatbuffer:
    """Subgraph 0 of a .tflite/.circle file read without running it: the circle schema shares
    the TFLite schema's tables and field ids for everything read here."""

    def __init__(self, path):
        self.data = pathlib.Path(path).read_bytes()
        self.model = schema.Model.GetRootAs(self.data, 0)
        if self.model.SubgraphsLength() == 0:
            raise ValueError(f"{path}: no subgraph")
        self.graph = self.model.Subgraphs(0)

    def name(self, index):
        return self.graph.Tensors(index).Name().decode()

    def inputs(self):
        return [self.name(self.graph.Inputs(i)) for i in range(self.graph.InputsLength())]

    def outputs(self):
        return [self.name(self.graph.Outputs(i)) for i in range(self.graph.OutputsLength())]

    def is_constant(self, index):
        """A tensor whose buffer holds data (inline, or at an offset in a large model)."""
        b = self.model.Buffers(self.graph.Tensors(index).Buffer())
        return b is not None and (b.DataLength() > 0 or b.Offset() > 1)

    def quant(self, index):
        """As `quant` above, from the file: onert's tensor info has no quantization."""
        q = self.graph.Tensors(index).Quantization()
        if q is None:
            return [], [], 0
        return ([float(q.Scale(i)) for i in range(q.ScaleLength())],
                [int(q.ZeroPoint(i)) for i in range(q.ZeroPointLength())], int(q.QuantizedDimension()))

    def index_of(self, name):
        hits = [i for i in range(self.graph.TensorsLength()) if self.name(i) == name]
        if len(hits) != 1:
            raise KeyError(f"{len(hits)} tensors named {name!r} in subgraph 0")
        return hits[0]
