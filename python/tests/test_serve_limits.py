"""cleave.serve against one bad client (issue 68), without a cluster: the .npz reader refuses
dims that would corrupt its size budget, decompression bombs and archives of a great many
entries before they cost memory or time; the requests in flight share one memory budget; the
archive is read off the event loop; a body that does not arrive in time is answered and closed
on both routes; and the ingress's own listener bounds its connections, from one client and in
all, closing the slow and the idle."""

import asyncio
import io
import json
import pickle
import socket
import struct
import threading
import time
import tracemalloc
import types
import zipfile
import zlib

import numpy as np
import pytest

from cleave import serve
from cleave.serve import wire

SPECS = {"a": ["float32", [None, None]], "b": ["float32", [None, None]]}


# ---------------------------------------------------------------------------- archives


def npy_header(descr, shape):
    header = ("{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)).encode()
    header += b" " * ((-(10 + len(header) + 1)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header


def npy(a):
    f = io.BytesIO()
    np.save(f, a)
    return f.getvalue()


def npz(members, how=zipfile.ZIP_DEFLATED):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", how) as z:
        for name, data in members.items():
            z.writestr(name + ".npy", data)
    return buf.getvalue()


LOCAL = struct.Struct("<4s5H3L2H")
CENTRAL = struct.Struct("<4s4B4HL2L5H2L")


class Zip:
    """A zip written record by record, so that it may say what a crafted one says."""

    def __init__(self):
        self.out, self.cd = bytearray(), []

    def add(self, name, data, method=0, packed=None, at=None):
        """An entry of `data`, stored, or deflated (`method` 8, `packed` its deflated bytes);
        with `at`, only named in the directory, at that offset."""
        n, packed = name.encode(), data if packed is None else packed
        crc = zlib.crc32(data)
        if at is None:
            at = len(self.out)
            self.out += LOCAL.pack(b"PK\x03\x04", 20, 0, method, 0, 0x21, crc, len(packed), len(data), len(n), 0)
            self.out += n + packed
        self.cd.append(
            CENTRAL.pack(
                b"PK\x01\x02", 20, 0, 20, 0, 0, method, 0, 0x21, crc, len(packed), len(data), len(n), 0, 0, 0, 0, 0, at
            )
            + n
        )

    def finish(self, comment=b"", zip64=False):
        cd = b"".join(self.cd)
        count, start = len(self.cd), len(self.out)
        tail = b""
        if zip64:  # the zip64 end record and its locator, as zipfile writes them past 65535 entries
            tail = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, len(cd), start)
            tail += struct.pack("<4sLQL", b"PK\x06\x07", 0, start + len(cd), 1)
        end = struct.pack(
            "<4s4H2LH", b"PK\x05\x06", 0, 0, min(count, 0xFFFF), min(count, 0xFFFF), len(cd), start, len(comment)
        )
        return bytes(self.out) + cd + tail + end + comment


def deflated(data):
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def read(body, max_bytes=1 << 30, inputs=("a", "b"), **kw):
    return serve.read_npz(body, list(inputs), max_bytes, SPECS, **kw)


def traced(f):
    """f()'s result or exception, its seconds and the peak bytes it allocated (numpy's and
    Python's allocations, as tracemalloc sees them)."""
    tracemalloc.start()
    t = time.perf_counter()
    try:
        out = f()
    except Exception as e:  # noqa: BLE001 - the exception is the result
        out = e
    took = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return out, took, peak


# ---------------------------------------------------------------------------- read_npz


@pytest.mark.parametrize("how", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_a_negative_or_overflowing_dim_is_refused_naming_the_entry(how):
    cases = [
        ("(-1, 17179869184)", "input 'a' (a.npy) has a negative dim in its shape [-1, 17179869184]"),
        ("(3, -2)", "input 'a' (a.npy) has a negative dim in its shape [3, -2]"),
        ("(4611686018427387904, 4611686018427387904)", "past what 64 bits count"),
        # A zero dim makes no bytes, but numpy cannot make the array either.
        ("(0, 4611686018427387904)", "past what 64 bits count"),
    ]
    for shape, message in cases:
        with pytest.raises(ValueError) as e:
            read(npz({"a": npy_header("<f4", shape)}, how))
        assert message in str(e.value), (shape, str(e.value))
        assert "\n" not in str(e.value)
        assert not isinstance(e.value, serve.wire.Refused), "a malformed header is the client's error: 400"
    # 2**62 bytes fit in 64 bits and pass no budget: the size limit, 413.
    with pytest.raises(serve.wire.Refused, match="more than 1048576 bytes") as e:
        serve.read_npz(npz({"a": npy_header("|u1", "(4611686018427387904,)")}, how), ["a"], 1 << 20)
    assert e.value.status == 413


def test_a_negative_first_entry_cannot_make_room_for_a_second():
    """The finding: entry 'a' (first in the directory, its record in the end record's comment so
    that its data ends with the body) said shape (-1, 2**34), its size -64 GiB took the budget
    below zero, and 'b' then unpacked 1.5 GiB past a 1 GiB cap. Here 'b' is 64 MiB against a
    1 MiB cap: refused at 'a', before anything of 'b' is unpacked."""
    z = Zip()
    nb = 64 << 20
    raw_b = npy_header("<f4", (nb // 4, 1)) + bytes(nb)
    z.add("b.npy", raw_b, 8, deflated(raw_b))
    cd_b = z.cd.pop()
    header_a = npy_header("<f4", (-1, 1 << 34))
    z.add("a.npy", header_a, at=len(z.out) + 46 + 5 + len(cd_b) + 22)
    z.cd.append(cd_b)
    n = len(b"a.npy")
    comment = LOCAL.pack(b"PK\x03\x04", 20, 0, 0, 0, 0x21, zlib.crc32(header_a), len(header_a), len(header_a), n, 0)
    body = z.finish(comment=comment + b"a.npy" + header_a)
    assert [i.filename for i in zipfile.ZipFile(io.BytesIO(body)).infolist()] == ["a.npy", "b.npy"]
    out, took, peak = traced(lambda: read(body, max_bytes=1 << 20))
    assert isinstance(out, ValueError) and "input 'a' (a.npy) has a negative dim" in str(out), out
    assert peak < 8 << 20, f"{peak} bytes allocated"


def test_a_deflated_entry_past_the_ratio_is_refused_before_it_is_unpacked():
    raw = npy_header("<f4", (16 << 20, 1)) + bytes(64 << 20)  # 64 MiB of zeros: about 64 KB deflated
    body = npz({"a": npy(np.zeros((1, 1), np.float32)), "b": raw})
    assert len(body) < 100_000
    out, took, peak = traced(lambda: read(body))
    assert isinstance(out, serve.wire.Refused) and out.status == 413, out
    assert "b.npy unpacks to 67108992 bytes from" in str(out) and "CLEAVE_MAX_NPZ_RATIO" in str(out), str(out)
    assert took < 1.0 and peak < 4 << 20, (took, peak)
    # Zeros under the first MiB pass whatever their ratio (a mask of ones, say), as does data
    # that deflates as real tensors do.
    mask = np.zeros((256, 256), np.float32)
    noise = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)
    got = read(npz({"a": npy(mask), "b": npy(noise)}))
    assert (got["a"] == mask).all() and (got["b"] == noise).all()


def test_the_ratio_and_entry_caps_follow_their_variables(monkeypatch):
    raw = npy(np.zeros((1024, 1024), np.float32))  # 4 MiB of zeros
    body = npz({"a": raw, "b": raw})
    with pytest.raises(serve.wire.Refused, match="more than 100 times"):
        read(body)
    monkeypatch.setattr(wire, "MAX_NPZ_RATIO", 2000)
    assert read(body)["a"].shape == (1024, 1024)
    monkeypatch.setattr(wire, "MAX_NPZ_ENTRIES", 3)
    small = npy(np.zeros((1, 1), np.float32))
    four = npz({"a": raw, "b": raw, "c": small, "d": small})
    with pytest.raises(serve.wire.Refused, match=r"more than 3 entries, the most a request may \(CLEAVE_MAX_NPZ_"):
        read(four)
    # Never fewer than the model's inputs.
    assert sorted(read(four, inputs=("a", "b", "c", "d"))) == ["a", "b", "c", "d"]


def test_a_deflated_entry_is_unpacked_a_chunk_at_a_time_into_its_array(monkeypatch):
    monkeypatch.setattr(wire, "MAX_NPZ_RATIO", 10_000)
    raw = npy_header("<f4", (8 << 20, 1)) + bytes(32 << 20)
    body = npz({"a": npy(np.zeros((1, 1), np.float32)), "b": raw})
    out, took, peak = traced(lambda: read(body))
    assert out["b"].shape == (8 << 20, 1) and not out["b"].any()
    # The array (32 MiB) and a chunk, not a second copy of the whole.
    assert peak < (32 << 20) + (12 << 20), f"{peak / 2**20:.1f} MiB allocated for a 32 MiB array"


def test_a_header_declaring_more_than_its_entry_holds_is_refused_before_allocating():
    z = Zip()
    z.add("a.npy", npy(np.zeros((1, 1), np.float32)))
    data = npy_header("<f4", (16 << 20, 1)) + bytes(64)  # declares 64 MiB, holds 64 bytes
    z.add("b.npy", data, 8, deflated(data))
    out, took, peak = traced(lambda: read(z.finish()))
    assert isinstance(out, ValueError), out
    assert "input 'b' declares 67108864 bytes of data, more than its entry's" in str(out)
    assert peak < 4 << 20, peak


def test_only_stored_or_deflated_entries_are_read():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_BZIP2) as z:
        z.writestr("a.npy", npy(np.zeros((2, 2), np.float32)))
    with pytest.raises(ValueError, match="a.npy is packed by zip method 12; an .npz entry is stored or deflated"):
        read(buf.getvalue(), inputs=("a",))


def test_an_archive_of_many_entries_is_refused_before_zipfile_reads_it():
    z = Zip()
    for i in range(100_000):
        z.add(f"e{i}.npy", b"")
    z.add("a.npy", npy(np.ones((2, 2), np.float32)))
    body = z.finish()
    t = time.perf_counter()
    zipfile.ZipFile(io.BytesIO(body)).infolist()
    zipfile_s = time.perf_counter() - t
    out, _, peak = traced(lambda: read(body, inputs=("a",)))
    assert isinstance(out, serve.wire.Refused) and out.status == 413, out
    assert str(out) == "the archive lists more than 1024 entries, the most a request may (CLEAVE_MAX_NPZ_ENTRIES)"
    assert peak < 1 << 20, peak
    t = time.perf_counter()
    with pytest.raises(serve.wire.Refused):
        read(body, inputs=("a",))
    took = time.perf_counter() - t
    assert took < zipfile_s / 10, (took, zipfile_s)


def test_entries_are_counted_as_zipfile_reads_them():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    saved, packed = io.BytesIO(), io.BytesIO()
    np.savez(saved, a=x, b=x)
    np.savez_compressed(packed, a=x, b=x)
    commented = io.BytesIO()
    with zipfile.ZipFile(commented, "w") as zf:
        zf.writestr("a.npy", npy(x))
        zf.comment = b"a comment" * 10
    z64 = Zip()
    for name in "abc":
        z64.add(name + ".npy", npy(x))
    bodies = [
        saved.getvalue(),
        packed.getvalue(),
        serve.write_npz({"a": x, "b": x, "c": x}),
        commented.getvalue(),
        z64.finish(zip64=True),
        b"prepended data" + saved.getvalue(),
    ]
    for body in bodies:
        want = len(zipfile.ZipFile(io.BytesIO(body)).infolist())
        assert serve.wire.count_entries(body, 1024) == want
        assert serve.wire.count_entries(body, want - 1) == want  # past the cap: stops there
        if body.startswith(b"PK"):  # (read_npz takes an archive from its first byte)
            assert (read(body, inputs=("a",))["a"] == x).all()
    # Cut short: no end record, or a directory that does not hold together; zipfile says so.
    assert serve.wire.count_entries(bodies[0][:100], 1024) is None
    with pytest.raises(zipfile.BadZipFile):
        read(bodies[0][:100])


# ---------------------------------------------------------------------------- the shared budget


def test_the_in_flight_budget_is_shared_and_given_back():
    budget = serve.wire.Budget(1000)
    one, two = budget.lease(), budget.lease()
    one.take(600)
    with pytest.raises(serve.wire.Refused) as e:
        two.take(500)
    assert e.value.status == 503 and e.value.headers == {"retry-after": "1"}
    assert "hold 600 of the 1000 bytes" in str(e.value) and "CLEAVE_MAX_INFLIGHT_BYTES" in str(e.value)
    # A request that alone passes the budget can never pass: 413, not "try again".
    with pytest.raises(serve.wire.Refused) as e:
        two.take(1001)
    assert e.value.status == 413 and "CLEAVE_MAX_INFLIGHT_BYTES" in str(e.value)
    one.close()
    two.take(1000)
    assert budget.used == 1000
    two.close()
    assert budget.used == 0
    with pytest.raises(serve.wire.Refused):
        two.take(1)
    # read_npz takes what it unpacks or copies, not what stays over the body's bytes.
    x = np.ones((64, 64), np.float32)
    lease = serve.wire.Budget(1 << 20).lease()
    read(npz({"a": npy(x)}), inputs=("a",), lease=lease)
    assert lease.held == x.nbytes
    for name, held in (("abcdef", 0), ("a", x.nbytes)):  # stored: data aligned under the one name, not the other
        lease = serve.wire.Budget(1 << 20).lease()
        serve.read_npz(npz({name: npy(x)}, zipfile.ZIP_STORED), [name], 1 << 20, lease=lease)
        assert lease.held == held, name
    with pytest.raises(serve.wire.Refused) as e:
        read(npz({"a": npy(x)}), inputs=("a",), lease=serve.wire.Budget(1000).lease())
    assert e.value.status == 413


# ---------------------------------------------------------------------------- the ingress


class Answer:
    def __init__(self, coro):
        self.task = asyncio.ensure_future(coro)

    def __await__(self):
        return self.task.__await__()

    def cancel(self):
        self.task.cancel()


class EchoPart:
    """A part behind a handle that answers the shapes it was given (or `reply` bytes of zeros):
    the model is not what these tests are about."""

    def __init__(self, reply=0):
        self.reply = reply
        self.inputs = types.SimpleNamespace(remote=lambda: Answer(self._value(SPECS)))
        self.describe = types.SimpleNamespace(remote=lambda: Answer(self._value({"deployment": "part1_cpu"})))

    async def _value(self, v):
        return v

    def remote(self, feeds, budget_s=None, *upstream):
        async def run():
            shapes = [d for n in sorted(feeds) for d in feeds[n].shape]
            y = np.zeros(self.reply, np.uint8) if self.reply else np.array(shapes)
            return {"outputs": {"y": y}, "parts": {"part1_cpu": {"deployment": "part1_cpu", "backend": "cpu"}}}

        return Answer(run())


META = {
    "name": "t",
    "digest": "-",
    "inputs": ["a", "b"],
    "outputs": ["y"],
    "parts": [{"inputs": ["a", "b"], "outputs": ["y"], "backend": "cpu", "deployment": "part1_cpu"}],
}


def ok_body():
    return serve.write_npz({"a": np.ones((2, 3), np.float32), "b": np.ones((3, 2), np.float32)})


def request(chunks, client=("10.0.0.1", 4000), headers=()):
    """A starlette Request whose body arrives as `chunks` says: bytes, or a number of seconds
    to wait first, or None to wait for ever."""
    from starlette.requests import Request

    pending = list(chunks)

    async def receive():
        while pending and not isinstance(pending[0], bytes):
            wait = pending.pop(0)
            await (asyncio.sleep(wait) if wait is not None else asyncio.Event().wait())
        body = pending.pop(0) if pending else b""
        return {"type": "http.request", "body": body, "more_body": bool(pending)}

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/t",
        "raw_path": b"/t",
        "query_string": b"",
        "headers": [(k.encode(), v.encode()) for k, v in headers],
        "client": client,
    }
    return Request(scope, receive)


async def answered(ingress, req):
    r = await asyncio.wait_for(ingress(req), 10)  # a limit that does not hold fails, never hangs
    body = json.loads(r.body) if r.headers.get("content-type") == "application/json" else r.body
    return r.status_code, body, r.headers


def test_a_body_that_does_not_arrive_in_time_is_answered_408_and_closed(monkeypatch):
    monkeypatch.setattr(serve.ingress, "BODY_TIMEOUT_S", 0.4)
    monkeypatch.setattr(serve.ingress, "BODY_MIN_RATE", 1000)
    ingress = serve.Ingress(META, 60, {"kind": "handles"}, EchoPart())
    body = ok_body()

    async def go():
        # Headers and one byte, then nothing: the slow-loris request.
        t = time.monotonic()
        status, said, headers = await answered(ingress, request([body[:1], None]))
        took = time.monotonic() - t
        assert status == 408 and headers["connection"] == "close", (status, said)
        assert said["error"].startswith("the body did not arrive in time: 1 bytes in 0s"), said
        assert "CLEAVE_BODY_TIMEOUT_S=0.4s" in said["error"] and "CLEAVE_BODY_MIN_RATE=1000" in said["error"]
        assert 0.35 < took < 1.5, took
        # 100 bytes every 0.05 s (2000 B/s) earns more time than it spends: it arrives, in 1.5 s.
        chunks = [c for i in range(0, len(body), 100) for c in (0.05, body[i : i + 100])]
        status, said, _ = await answered(ingress, request(chunks))
        assert status == 200, said
        # 10 bytes every 0.05 s (200 B/s) does not.
        chunks = [c for i in range(0, len(body), 10) for c in (0.05, body[i : i + 10])]
        status, said, _ = await answered(ingress, request(chunks))
        assert status == 408, said
        assert ingress.uploads == {} and ingress.budget.used == 0

    asyncio.run(go())


def test_one_client_cannot_hold_every_upload(monkeypatch):
    monkeypatch.setattr(serve.ingress, "MAX_UPLOADS_PER_CLIENT", 2)
    monkeypatch.setattr(serve.ingress, "BODY_TIMEOUT_S", 0.5)
    ingress = serve.Ingress(META, 60, {"kind": "handles"}, EchoPart())
    body = ok_body()

    async def go():
        bad = ("10.6.6.6", 1)
        stalled = [asyncio.ensure_future(answered(ingress, request([b"P", None], client=bad))) for _ in range(2)]
        await asyncio.sleep(0.05)
        assert ingress.uploads == {"10.6.6.6": 2}
        status, said, headers = await answered(ingress, request([body], client=bad))
        assert status == 429 and headers["retry-after"] == "1" and headers["connection"] == "close"
        assert said["error"] == (
            "10.6.6.6 has 2 requests whose bodies are still arriving, the most one client may "
            "(CLEAVE_MAX_UPLOADS_PER_CLIENT)"
        )
        # Another client is served meanwhile.
        status, _, _ = await answered(ingress, request([body], client=("10.0.0.2", 1)))
        assert status == 200
        assert [s for s, _, _ in await asyncio.gather(*stalled)] == [408, 408]
        assert ingress.uploads == {}

    asyncio.run(go())


def test_requests_in_flight_share_one_budget(monkeypatch):
    body = ok_body()
    # Room for one body and the copy that joins its chunks, not for a second, bigger, body too.
    total = 2 * len(body) + 100
    big = serve.write_npz({"a": np.ones((2, 3), np.float32), "b": np.ones((3, 2 + len(body) // 24), np.float32)})
    assert len(body) + 100 < len(big) <= total - 100
    monkeypatch.setattr(serve.ingress, "MAX_INFLIGHT_BYTES", total)
    ingress = serve.Ingress(META, 60, {"kind": "handles"}, EchoPart())

    async def go():
        # One request holds its body's bytes while the rest of it arrives...
        first = asyncio.ensure_future(answered(ingress, request([body[:-10], 0.3, body[-10:]], client=("10.0.0.1", 1))))
        await asyncio.sleep(0.1)
        assert ingress.budget.used == len(body) - 10
        # ...so another, from elsewhere, is told to come back.
        status, said, headers = await answered(ingress, request([big], client=("10.0.0.2", 1)))
        assert status == 503 and headers["retry-after"] == "1", (status, said)
        assert "CLEAVE_MAX_INFLIGHT_BYTES" in said["error"] and "try again shortly" in said["error"]
        assert (await first)[0] == 200
        assert ingress.budget.used == 0
        # Alone, it passes.
        assert (await answered(ingress, request([big], client=("10.0.0.2", 1))))[0] == 200
        # A body past the limit it declares is refused from its content-length, unread: 413.
        status, said, headers = await answered(ingress, request([b"P", None], headers=[("content-length", "9" * 12)]))
        assert status == 413 and headers["connection"] == "close" and "CLEAVE_MAX_BODY_BYTES" in said["error"]

    asyncio.run(go())


def test_archives_are_read_off_the_event_loop(monkeypatch):
    """A request whose archive takes a second to read delays no other: read_npz runs on a
    worker thread (a slow read stands in for a big archive)."""
    real = serve.ingress.read_npz

    def slow(body, *args, **kw):
        if len(body) > 10_000:
            time.sleep(1.0)
        return real(body, *args, **kw)

    monkeypatch.setattr(serve.ingress, "read_npz", slow)
    ingress = serve.Ingress(META, 60, {"kind": "handles"}, EchoPart())
    threads = []
    pool = ingress._parse_pool

    def counted():
        threads.append(1)
        return pool()

    monkeypatch.setattr(ingress, "_parse_pool", counted)
    big = serve.write_npz({"a": np.ones((128, 128), np.float32), "b": np.ones((1, 1), np.float32)})
    small = ok_body()

    async def go():
        t = time.monotonic()
        first = asyncio.ensure_future(answered(ingress, request([big])))
        await asyncio.sleep(0.05)
        status, _, _ = await answered(ingress, request([small]))
        small_s = time.monotonic() - t
        assert status == 200 and small_s < 0.5, small_s
        assert (await first)[0] == 200 and time.monotonic() - t >= 1.0
        # The small archive of stored entries was read on the loop (microseconds, no hop to a
        # thread); the big one on a thread, as is any with an entry to inflate.
        assert threads == [1]
        packed = io.BytesIO()
        np.savez_compressed(packed, a=np.ones((2, 3), np.float32), b=np.ones((3, 2), np.float32))
        assert (await answered(ingress, request([packed.getvalue()])))[0] == 200
        assert threads == [1, 1]

    asyncio.run(go())
    assert serve.wire.reads_inline(small) and not serve.wire.reads_inline(big)
    assert not serve.wire.reads_inline(npz({str(i): npy(np.ones(1)) for i in range(17)}, zipfile.ZIP_STORED))


# ---------------------------------------------------------------------------- the listener


@pytest.fixture
def listening(monkeypatch):
    """An ingress over an EchoPart answering on its own listener (127.0.0.1, any port), with
    the limits made small: yields (ingress, port)."""
    pytest.importorskip("uvicorn")
    monkeypatch.setattr(serve.listener, "HEADER_TIMEOUT_S", 0.6)
    monkeypatch.setattr(serve.listener, "MAX_CONNECTIONS", 8)
    monkeypatch.setattr(serve.listener, "MAX_CONNECTIONS_PER_CLIENT", 4)
    monkeypatch.setattr(serve.ingress, "BODY_TIMEOUT_S", 0.6)
    monkeypatch.setattr(serve.listener, "BODY_TIMEOUT_S", 0.6)
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    made = {}

    def make(reply=0):
        async def build():  # as Serve builds a replica: on its event loop
            return serve.Ingress(
                dict(META, listen={"host": "127.0.0.1", "port": 0}), 60, {"kind": "handles"}, EchoPart(reply)
            )

        made["ingress"] = ingress = asyncio.run_coroutine_threadsafe(build(), loop).result(10)
        port = ingress.listener.port
        for _ in range(100):  # listening once uvicorn has started
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        time.sleep(0.1)
        return ingress, port

    yield make
    if "ingress" in made:
        loop.call_soon_threadsafe(made["ingress"].listener.close)
        time.sleep(0.3)
    loop.call_soon_threadsafe(loop.stop)


def post(port, body, timeout=10):
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/t", body=body, headers={"content-type": "application/octet-stream"})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def bad_socket(port, source, data):
    s = socket.socket()
    s.settimeout(5)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    if data:
        s.sendall(data)
    return s


def outcome(s, within):
    """What the server did with `s` within `within` seconds: (its first response line or
    None, closed?)."""
    s.settimeout(0.1)
    end, got = time.monotonic() + within, b""
    while time.monotonic() < end:
        try:
            data = s.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            return (got.split(b"\r\n", 1)[0].decode() or None), True
        if not data:
            return (got.split(b"\r\n", 1)[0].decode() or None), True
        got += data
    return (got.split(b"\r\n", 1)[0].decode() or None), False


def was_closed(s):
    """Whether the server has closed `s` (read without waiting)."""
    s.setblocking(False)
    try:
        return s.recv(65536) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        s.setblocking(True)


HEAD = b"POST /t HTTP/1.1\r\nhost: x\r\ncontent-type: application/octet-stream\r\ncontent-length: 1000\r\n\r\n"


def test_the_listener_closes_slow_clients_and_keeps_answering_others(listening):
    ingress, port = listening()
    body = ok_body()
    # A client that sends nothing, one that sends half a header line, two that send their
    # headers and a byte of the body: four connections, this client's most.
    sends = (b"", b"POST /t HTTP/1.1\r\nx-slow: ", HEAD + b"P", HEAD + b"P")
    slow = [bad_socket(port, "127.0.0.2", data) for data in sends]
    time.sleep(0.2)
    # A fifth of its own: the one idle longest (the silent one) makes way.
    fifth = bad_socket(port, "127.0.0.2", b"")
    time.sleep(0.1)
    assert post(port, body)[0] == 200  # another client meanwhile
    seen = [outcome(s, 2.5) for s in slow + [fifth]]
    closed = [c for _, c in seen]
    assert all(closed), seen
    lines = [line for line, _ in seen]
    # The half header line and the two bodies too slow; the silent ones closed unanswered.
    assert lines == [None] + ["HTTP/1.1 408 Request Timeout"] * 3 + [None], lines
    counts = ingress.listener.guard.describe()
    assert counts["closed"]["evicted"] == 1 and counts["closed"]["slow_headers"] == 1, counts
    assert counts["closed"]["idle"] == 1, counts
    # At the client's cap with every connection in a request, a new one is answered 503.
    busy = [bad_socket(port, "127.0.0.3", HEAD + b"P") for _ in range(4)]
    time.sleep(0.2)
    extra = bad_socket(port, "127.0.0.3", HEAD + b"P")
    line, was_closed = outcome(extra, 1.0)
    assert line == "HTTP/1.1 503 Service Unavailable" and was_closed, (line, was_closed)
    assert post(port, body)[0] == 200
    for s in slow + busy + [fifth, extra]:
        s.close()
    time.sleep(1.0)
    assert ingress.listener.guard.describe()["open"] == 0


def test_the_listener_refuses_endless_headers(listening):
    ingress, port = listening()
    s = bad_socket(port, "127.0.0.2", b"POST /t HTTP/1.1\r\nhost: x\r\n")
    try:
        for i in range(1000):  # 1 MB of header lines
            s.sendall(b"x-pad-%d: %s\r\n" % (i, b"y" * 1000))
    except OSError:
        pass  # closed on us, as it should be
    line, closed = outcome(s, 2.0)
    # httptools' parser has no bound (the listener's, 64 KiB: 431); h11 has its own (400).
    assert closed and line in (None, "HTTP/1.1 431 Request Header Fields Too Large", "HTTP/1.1 400 Bad Request"), line
    assert post(port, ok_body())[0] == 200
    s.close()


def test_the_listener_bounds_its_connections_in_all(listening):
    ingress, port = listening()
    body = ok_body()
    # Eight sources, two connections each sending nothing: the listener keeps 8 in all.
    silent = [bad_socket(port, f"127.0.1.{i}", b"") for i in range(8) for _ in range(2)]
    time.sleep(0.2)
    t = time.monotonic()
    assert post(port, body)[0] == 200  # the one idle longest made way
    assert time.monotonic() - t < 0.5
    # The first nine opened were closed, oldest first, each for a newer one; the rest stay
    # (until the header timeout).
    time.sleep(0.05)
    closed = [was_closed(s) for s in silent]
    assert closed == [True] * 9 + [False] * 7, closed
    assert ingress.listener.guard.describe() == {"open": 7, "closed": dict(ingress.listener.guard.counts, evicted=9)}
    for s in silent:
        s.close()


def test_the_listener_closes_a_client_that_does_not_read_its_reply(listening, monkeypatch):
    monkeypatch.setattr(serve.listener, "BODY_MIN_RATE", 1 << 30)
    ingress, port = listening(reply=64 << 20)
    # A client that reads takes all of it.
    status, reply = post(port, ok_body())
    assert status == 200 and len(reply) > 64 << 20
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    body = ok_body()
    s.sendall(b"POST /t HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
    time.sleep(2.0)  # and read nothing: 64 MiB cannot all be sent
    guard = ingress.listener.guard
    assert guard.describe() == {"open": 0, "closed": dict(guard.counts, slow_replies=1)}, guard.describe()
    # Dropped, the rest unsent: the client reads what its buffers took, then the end.
    s.settimeout(5)
    got = 0
    try:
        while True:
            data = s.recv(1 << 20)
            if not data:
                break
            got += len(data)
    except ConnectionResetError:
        pass
    assert got < 32 << 20, got
    s.close()


# ---------------------------------------------------------------------------- settings


def test_limits_come_from_the_environment_and_a_bad_value_names_its_variable(monkeypatch):
    monkeypatch.setenv("CLEAVE_TEST_LIMIT", "12")
    assert wire.env_number("CLEAVE_TEST_LIMIT", 5) == 12
    monkeypatch.setenv("CLEAVE_TEST_LIMIT", "2.5")
    assert wire.env_number("CLEAVE_TEST_LIMIT", 1.0, float) == 2.5
    for bad in ("2.5", "0", "-1", "lots"):
        monkeypatch.setenv("CLEAVE_TEST_LIMIT", bad)
        with pytest.raises(ValueError, match=f"CLEAVE_TEST_LIMIT={bad!r}: give a positive integer"):
            wire.env_number("CLEAVE_TEST_LIMIT", 5)
    monkeypatch.delenv("CLEAVE_TEST_LIMIT")
    assert wire.env_number("CLEAVE_TEST_LIMIT", 5) == 5
    # The defaults.
    assert (wire.MAX_NPZ_ENTRIES, wire.MAX_NPZ_RATIO, wire.BODY_TIMEOUT_S) == (1024, 100, 30.0)
    assert (wire.BODY_MIN_RATE, wire.MAX_UPLOADS_PER_CLIENT) == (256 << 10, 32)
    assert wire.MAX_INFLIGHT_BYTES == 2 * wire.MAX_BODY_BYTES
    assert (serve.listener.MAX_CONNECTIONS, serve.listener.MAX_CONNECTIONS_PER_CLIENT) == (256, 64)


def test_the_packages_module_values_pickle():
    """Serve ships cleave.serve to its replicas by value (cloudpickle), module values with it:
    a value that does not pickle (a struct.Struct, a lock) fails the deployment."""
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(serve.__path__):
        module = importlib.import_module(f"cleave.serve.{info.name}")
        for name, value in vars(module).items():
            if name.startswith("__") or isinstance(value, (types.ModuleType, types.FunctionType, type)):
                continue
            try:
                pickle.dumps(value)
            except Exception as e:  # noqa: BLE001 - any failure is the finding
                pytest.fail(f"cleave.serve.{info.name}.{name} does not pickle: {e}")
