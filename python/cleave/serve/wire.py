"""The request and reply format: .npz bodies read without unpacking more than the model takes,
written once, checked against the inputs' dtypes and dims; errors cut to one line; and the
limits that keep one client's requests from taking the ingress's memory, time or threads."""

import io
import os
import struct
import threading


def env_number(name, default, kind=int):
    """The number in environment variable `name`, else `default`; ValueError naming it."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = kind(text)
    except ValueError:
        value = -1
    if value <= 0:
        raise ValueError(f"{name}={text!r}: give a positive {'integer' if kind is int else 'number'}")
    return value


# The largest request body, and the most bytes its inputs may unpack to.
MAX_BODY_BYTES = env_number("CLEAVE_MAX_BODY_BYTES", 1 << 30)
# What the requests in flight may hold at once, bodies and what they unpack to together, on
# both routes: twice the largest body, so one request of the largest size always fits.
MAX_INFLIGHT_BYTES = env_number("CLEAVE_MAX_INFLIGHT_BYTES", 2 * MAX_BODY_BYTES)
# The most entries an archive may list (an .npz holds one a tensor); never fewer than the
# model's inputs.
MAX_NPZ_ENTRIES = env_number("CLEAVE_MAX_NPZ_ENTRIES", 1024)
# The most a deflated entry may unpack to, as a multiple of its packed size (tensors of real
# data deflate a few times at most; zeros, a thousand times), past a first MiB any entry may.
MAX_NPZ_RATIO = env_number("CLEAVE_MAX_NPZ_RATIO", 100)
RATIO_FREE_BYTES = 1 << 20
# A body must arrive within BODY_TIMEOUT_S, plus a second for every BODY_MIN_RATE bytes of
# it (a reply must leave as fast, on the ingress's own listener).
BODY_TIMEOUT_S = env_number("CLEAVE_BODY_TIMEOUT_S", 30.0, float)
BODY_MIN_RATE = env_number("CLEAVE_BODY_MIN_RATE", 256 << 10)
# Requests from one client address whose bodies are still arriving, at once; beyond, 429.
MAX_UPLOADS_PER_CLIENT = env_number("CLEAVE_MAX_UPLOADS_PER_CLIENT", 32)


class Refused(ValueError):
    """A request refused for a limit: `status` is the HTTP status it answers (413 too large,
    408 too slow, 429 one client over its share, 503 the ingress's shared budget spent)."""

    def __init__(self, message, status=413, retry_after=None):
        super().__init__(message)
        self.status = status
        self.headers = {"retry-after": str(retry_after)} if retry_after is not None else {}


class Budget:
    """Bytes the requests in flight hold (their bodies and what they unpack to), shared by
    every request of the process: `lease()` gives one request's share, taken as it grows and
    given back whole (thread-safe: archives are read on worker threads)."""

    def __init__(self, total, variable="CLEAVE_MAX_INFLIGHT_BYTES"):
        self.total, self.variable = total, variable
        self.used = 0
        self.lock = threading.Lock()

    def lease(self):
        return Lease(self)


class Lease:
    """One request's bytes of a Budget."""

    def __init__(self, budget):
        self.budget, self.held, self.closed = budget, 0, False

    def take(self, n):
        """Holds `n` more bytes, or raises Refused: 413 where this request alone passes the
        budget, 503 where the requests in flight hold too much of it now."""
        b = self.budget
        with b.lock:
            if self.closed:
                raise Refused("the request was given up", 503)
            if self.held + n > b.total:
                raise Refused(
                    f"the request needs more than {b.total} bytes held at once (its body and the inputs it unpacks "
                    f"to), the most the ingress gives all requests in flight ({b.variable})"
                )
            if b.used + n > b.total:
                raise Refused(
                    f"the requests in flight hold {b.used} of the {b.total} bytes the ingress gives them "
                    f"({b.variable}); try again shortly",
                    503,
                    retry_after=1,
                )
            b.used += n
            self.held += n

    def give(self, n):
        b = self.budget
        with b.lock:
            n = min(n, self.held)
            self.held -= n
            b.used -= n

    def close(self):
        """Gives back all it holds; takes after this are refused."""
        b = self.budget
        with b.lock:
            b.used -= self.held
            self.held = 0
            self.closed = True


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
        if spec is None or spec[0] is None or spec[1] is None or any(d is None for d in spec[1]):
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
    `spec` is [dtype name or None, dims with None where dynamic (None: any rank)], or None
    when unknown."""
    if spec is None:
        return
    want_dtype, want_dims = spec
    if want_dtype is not None and str(dtype) != want_dtype:
        raise ValueError(f"input {name!r} is {dtype}, the model takes {want_dtype}")
    if want_dims is None:
        return
    shown = "[" + ", ".join("?" if d is None else str(d) for d in want_dims) + "]"
    if len(shape) != len(want_dims) or any(w is not None and w != d for d, w in zip(shape, want_dims)):
        raise ValueError(f"input {name!r} has shape {list(shape)}, the model takes {shown}")


def read_npz(body, inputs, max_bytes, specs=None, *, why=None, lease=None):
    """The graph inputs in an .npz body. Only members named for an input are read, and each
    only after its .npy header (dtype and shape, read before any data is unpacked) has been
    checked against what the model takes (`specs`, see check_input) and its size against
    `max_bytes` in all (`why`: where that figure comes from, said when it is passed): a small
    archive cannot expand into gigabytes, a tensor of the wrong type or shape is refused
    before it is unpacked, and members the model does not take are never decompressed.

    What one archive may cost is bounded before it is read: at most MAX_NPZ_ENTRIES entries
    (counted in its central directory before zipfile reads it), entries stored or deflated
    only, a deflated one unpacking to at most MAX_NPZ_RATIO times its packed size (past
    RATIO_FREE_BYTES), dims of 0 or more whose product fits in 64 bits; and every array's
    memory is taken from `lease` (a Lease of the ingress's Budget, shared by the requests in
    flight) before it is made. Over a limit it raises Refused (a ValueError with the HTTP
    status), naming the limit and its variable; a malformed archive, ValueError.

    A member stored as np.savez writes it (not deflated) becomes an array over the body's
    own bytes, without a copy where its data lies aligned for its dtype and with one where
    not; its CRC is not recomputed (TCP carried the body; zipfile's checked read cost 1.6 ms
    a MiB on this VM, against 0.3 for the CRC alone). A deflated member (np.savez_compressed)
    is unpacked through zipfile, CRC checked, a chunk at a time into its array."""
    import zipfile

    import numpy as np

    if not isinstance(body, bytes):
        body = bytes(body)
    if not body.startswith(b"PK"):
        raise ValueError("the body is not an .npz archive (np.savez writes one)")
    specs = specs or {}
    wanted = set(inputs)
    cap = max(MAX_NPZ_ENTRIES, len(wanted))
    # None: records that do not hold together, which zipfile refuses too, after reading at
    # most `cap` entries of the directory (count_entries stops past that many).
    entries = count_entries(body, cap)
    if entries is not None and entries > cap:
        raise Refused(f"the archive lists more than {cap} entries, the most a request may (CLEAVE_MAX_NPZ_ENTRIES)")
    limit = (max_bytes, f" ({why})" if why else "")
    feeds = {}
    budget = {"total": 0}
    with zipfile.ZipFile(io.BytesIO(body)) as z:
        infos = z.infolist()
        if len(infos) > cap:  # where zipfile reads the directory otherwise than count_entries
            raise Refused(f"the archive lists more than {cap} entries, the most a request may (CLEAVE_MAX_NPZ_ENTRIES)")
        for info in infos:
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            if name not in wanted or name in feeds:
                continue
            # The zip directory's uncompressed size bounds what unpacking may produce.
            if budget["total"] + info.file_size > max_bytes:
                raise _unpacks_past(limit)
            if info.flag_bits & 0x1:
                raise ValueError(f"{info.filename} is encrypted")
            if info.compress_type == zipfile.ZIP_STORED:
                feeds[name] = _stored_member(body, info, name, specs, budget, limit, lease)
                continue
            if info.compress_type != zipfile.ZIP_DEFLATED:
                raise ValueError(
                    f"{info.filename} is packed by zip method {info.compress_type}; an .npz entry is stored or deflated"
                )
            if info.compress_size > len(body):
                raise ValueError(f"{info.filename}: its directory record gives more packed bytes than the body holds")
            if info.file_size > max(MAX_NPZ_RATIO * info.compress_size, RATIO_FREE_BYTES):
                raise Refused(
                    f"{info.filename} unpacks to {info.file_size} bytes from {info.compress_size}, more than "
                    f"{MAX_NPZ_RATIO} times (CLEAVE_MAX_NPZ_RATIO; tensors of real data deflate a few times at most)"
                )
            with z.open(info) as f:
                shape, fortran, dtype, nbytes = _npy_header(f, info, name, specs, budget, limit)
                # Unpacking stops at the entry's size: a header that declares more lies.
                if nbytes > info.file_size:
                    raise ValueError(
                        f"input {name!r} declares {nbytes} bytes of data, more than its entry's {info.file_size}"
                    )
                if lease is not None:
                    lease.take(nbytes)
                data = bytearray(nbytes)
                view = memoryview(data)
                got = 0
                while got < nbytes:
                    # A chunk at a time: readinto of the whole would unpack it all into a copy first.
                    n = f.readinto(view[got : got + READ_CHUNK])
                    if not n:
                        raise ValueError(f"input {name!r} ends after {got} of the {nbytes} bytes its header declares")
                    got += n
            feeds[name] = np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")
    return feeds


READ_CHUNK = 1 << 22
# The zip end records (formats, not struct.Struct objects: the package is pickled by value for
# Serve's replicas, and a Struct does not pickle).
_END, _END_SIZE = "<4s4H2LH", 22
_END64, _END64_SIZE, _END64_LOCATOR = "<4sQ2H2L2Q2Q", 56, 20


def count_entries(body, cap):
    """How many entries the zip in `body` lists, its central directory walked as zipfile
    reads it (the directory just before the end record, or before the zip64 end record that
    precedes it) but no further than `cap` + 1 of them: a directory of a million entries,
    which zipfile would spend seconds (and hundreds of MB) reading, costs microseconds to
    refuse. None where the records do not hold together (zipfile would not read it either)."""
    walked = _walk_directory(body, cap)
    return None if walked is None else walked[0]


# An archive this small, of this few entries and all stored, reads in microseconds: on the
# event loop, without the hop to a thread (about 0.1 ms).
INLINE_READ_BYTES = 64 << 10
INLINE_READ_ENTRIES = 16


def reads_inline(body):
    """Whether read_npz of `body` is cheap enough for the event loop: a small archive of few
    entries, none to inflate (bounded by its directory, read before zipfile is)."""
    if len(body) > INLINE_READ_BYTES:
        return False
    walked = _walk_directory(body, INLINE_READ_ENTRIES)
    return walked is not None and walked[0] <= INLINE_READ_ENTRIES and walked[1]


def _walk_directory(body, cap):
    """(entries, whether all are stored) as count_entries walks them; None as it says."""
    n = len(body)
    at = n - _END_SIZE
    if not (at >= 0 and body[at : at + 4] == b"PK\x05\x06" and body[n - 2 :] == b"\0\0"):
        # A comment follows the end record: the last end signature within a comment's reach.
        at = body.rfind(b"PK\x05\x06", max(0, n - _END_SIZE - 65535))
        if at < 0 or at + _END_SIZE > n:
            return None
    _, _, _, _, _, size_cd, _, _ = struct.unpack_from(_END, body, at)
    end = at
    loc = at - _END64_LOCATOR
    if loc >= 0 and body[loc : loc + 4] == b"PK\x06\x07":
        rec = loc - _END64_SIZE
        if rec >= 0 and body[rec : rec + 4] == b"PK\x06\x06":
            size_cd = struct.unpack_from(_END64, body, rec)[8]
            end = rec
    pos = end - size_cd
    if pos < 0:
        return None
    count, stored = 0, True
    while pos < end:
        if count > cap:
            break
        if pos + 46 > n or body[pos : pos + 4] != b"PK\x01\x02":
            return None
        stored = stored and body[pos + 10 : pos + 12] == b"\0\0"
        name_len, extra_len, comment_len = struct.unpack_from("<3H", body, pos + 28)
        pos += 46 + name_len + extra_len + comment_len
        count += 1
    return count, stored


def _unpacks_past(limit):
    max_bytes, why = limit
    return Refused(f"the inputs unpack to more than {max_bytes} bytes, the most this model takes{why}")


def _npy_header(f, info, name, specs, budget, limit):
    """(shape, fortran order, dtype, data bytes) of the .npy member open as `f`, checked
    against the model and what is left of `limit` (max bytes, why); `f` is left at the data."""
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
    # numpy reads any integers as dims: a negative one would make the size below zero (and
    # the budget with it), a huge one a size no array has.
    if any(d < 0 for d in shape):
        raise ValueError(f"input {name!r} ({info.filename}) has a negative dim in its shape {list(shape)}")
    nbytes = dtype.itemsize
    span = max(dtype.itemsize, 1)
    for d in shape:
        nbytes *= d
        span *= max(d, 1)
    if span >= 1 << 63:
        raise ValueError(f"input {name!r} ({info.filename}) has shape {list(shape)}, past what 64 bits count")
    check_input(name, dtype, shape, specs.get(name))
    budget["total"] += nbytes
    if budget["total"] > limit[0]:
        raise _unpacks_past(limit)
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


def _stored_member(body, info, name, specs, budget, limit, lease):
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
    shape, fortran, dtype, nbytes = _npy_header(f, info, name, specs, budget, limit)
    have = len(member) - f.pos
    if have < nbytes:
        raise ValueError(f"input {name!r} ends after {max(0, have)} of the {nbytes} bytes its header declares")
    order = "F" if fortran else "C"
    if nbytes == 0:
        return np.empty(shape, dtype=dtype, order=order)
    offset = start + f.pos
    array = np.frombuffer(body, dtype=dtype, count=nbytes // dtype.itemsize, offset=offset).reshape(shape, order=order)
    if array.flags.aligned:
        return array
    # Misaligned data is copied once: engines may read it with aligned loads.
    if lease is not None:
        lease.take(nbytes)
    return array.copy(order=order)


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
