"""The request and reply format: .npz bodies read without unpacking more than the model takes,
written once, checked against the inputs' dtypes and dims; and errors cut to one line."""

import io
import os
import struct

# The largest request body, and the most bytes its inputs may unpack to.
MAX_BODY_BYTES = int(os.environ.get("CLEAVE_MAX_BODY_BYTES", str(1 << 30)))


# What any HTTP client may see of each part (which Ray node ran it is for ``describe``, on
# the handle only).
PUBLIC_PART_KEYS = ("deployment", "backend", "compute_s", "cpu_s", "in_s", "out_s")


def public_parts(parts):
    """Each part's name, backend and compute time and, on the compiled plane, the CPU time of
    the thread that ran it and the time its inputs took to reach it (and its results to
    reach the ingress) where it ran on the ingress's node."""
    return [{k: p[k] for k in PUBLIC_PART_KEYS if k in p} for p in parts]


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
    never decompressed.

    A member stored as np.savez writes it (not deflated) becomes an array over the body's
    own bytes, without a copy where its data lies aligned for its dtype and with one where
    not; its CRC is not recomputed (TCP carried the body; zipfile's checked read cost 1.6 ms
    a MiB on this VM, against 0.3 for the CRC alone). A deflated member (np.savez_compressed)
    is unpacked through zipfile, CRC checked."""
    import zipfile

    import numpy as np

    if not isinstance(body, bytes):
        body = bytes(body)
    if not body.startswith(b"PK"):
        raise ValueError("the body is not an .npz archive (np.savez writes one)")
    specs = specs or {}
    wanted = set(inputs)
    feeds = {}
    budget = {"total": 0}
    with zipfile.ZipFile(io.BytesIO(body)) as z:
        for info in z.infolist():
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            if name not in wanted or name in feeds:
                continue
            # The zip directory's uncompressed size bounds what unpacking may produce.
            if budget["total"] + info.file_size > max_bytes:
                raise ValueError(f"the inputs unpack to more than {max_bytes} bytes, the most this model takes")
            if info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & 0x1:
                feeds[name] = _stored_member(body, info, name, specs, budget, max_bytes)
                continue
            with z.open(info) as f:
                shape, fortran, dtype, nbytes = _npy_header(f, info, name, specs, budget, max_bytes)
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


def _npy_header(f, info, name, specs, budget, max_bytes):
    """(shape, fortran order, dtype, data bytes) of the .npy member open as `f`, checked
    against the model and what is left of `max_bytes`; `f` is left at the data."""
    import numpy as np

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
    budget["total"] += nbytes
    if budget["total"] > max_bytes:
        raise ValueError(f"the inputs unpack to more than {max_bytes} bytes, the most this model takes")
    return shape, fortran, dtype, nbytes


class _ViewReader:
    """read() over a memoryview, for numpy's .npy header readers."""

    def __init__(self, view):
        self.view, self.pos = view, 0

    def read(self, n=-1):
        end = len(self.view) if n is None or n < 0 else min(len(self.view), self.pos + n)
        out = bytes(self.view[self.pos : end])
        self.pos = end
        return out


def _stored_member(body, info, name, specs, budget, max_bytes):
    """The array of a stored (not deflated) member, over `body`'s bytes where aligned."""
    import numpy as np

    # The local header: its name and extra field lengths place the data (the central
    # directory's may differ).
    at = info.header_offset
    local = body[at : at + 30]
    if len(local) < 30 or local[:4] != b"PK\x03\x04":
        raise ValueError(f"{info.filename}: the archive's directory points at no member")
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    start = at + 30 + name_len + extra_len
    member = memoryview(body)[start : start + info.compress_size]
    f = _ViewReader(member)
    shape, fortran, dtype, nbytes = _npy_header(f, info, name, specs, budget, max_bytes)
    have = len(member) - f.pos
    if have < nbytes:
        raise ValueError(f"input {name!r} ends after {max(0, have)} of the {nbytes} bytes its header declares")
    order = "F" if fortran else "C"
    if nbytes == 0:
        return np.empty(shape, dtype=dtype, order=order)
    offset = start + f.pos
    array = np.frombuffer(body, dtype=dtype, count=nbytes // dtype.itemsize, offset=offset).reshape(shape, order=order)
    # Misaligned data is copied once: engines may read it with aligned loads.
    return array if array.flags.aligned else array.copy(order=order)


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
            array = np.asarray(value)
            if not array.flags.c_contiguous:
                array = array.copy(order="C")
            if array.dtype.hasobject:
                raise ValueError(f"{name!r} holds Python objects, which an .npz without pickles cannot")
            header = io.BytesIO()
            fields = np.lib.format.header_data_from_array_1_0(array)
            try:
                np.lib.format.write_array_header_1_0(header, fields)
            except ValueError:  # a header over 64 KiB (a great many dims or fields)
                header = io.BytesIO()
                np.lib.format.write_array_header_2_0(header, fields)
            with z.open(name + ".npy", "w", force_zip64=True) as f:
                f.write(header.getvalue())
                # The array's own bytes, not numpy's chunked copy (write_array): the reply's data
                # is copied once, into the archive.
                f.write(memoryview(array.reshape(-1).view(np.uint8)) if array.size else b"")
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
