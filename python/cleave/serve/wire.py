"""The request and reply format: .npz bodies read without unpacking more than the model takes,
written once, checked against the inputs' dtypes and dims; and errors cut to one line."""

import io
import os

# The largest request body, and the most bytes its inputs may unpack to.
MAX_BODY_BYTES = int(os.environ.get("CLEAVE_MAX_BODY_BYTES", str(1 << 30)))


def public_parts(parts):
    """What any HTTP client may see of each part: its name, backend, compute time and, on the
    compiled plane, the CPU time of the thread that ran it (which Ray node ran it is for
    ``describe``, on the handle only)."""
    return [{k: p[k] for k in ("deployment", "backend", "compute_s", "cpu_s") if k in p} for p in parts]


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


def innermost(e):
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
    e = innermost(e)
    text = str(e).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # RayTaskError text starts with the task's name and a traceback; the message is last.
    if lines and (lines[0].startswith("ray::") or "Traceback" in text):
        line = lines[-1]
    else:
        line = lines[0] if lines else ""
    name = type(e).__name__
    return f"{name}: {line}" if line and not line.startswith(name) else (line or name)
