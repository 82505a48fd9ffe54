#!/usr/bin/env python3
"""Issue 68's findings against the ingress, measured: what one bad client does to a deployment.

    python3 scripts/reports/serve_abuse.py [--package DIR] [--route listener|serve] [--cases a,b]

Cases (each answers the status the bad request got, its seconds, and the peak RSS the serving
process grew by while it was handled, as /proc's VmHWM after clear_refs):
  negative-dims  an .npz whose first entry's header says shape (-1, 2**34) and whose second
                 deflates 1.5 GiB of zeros into 1.5 MB
  bomb           0.98 MB of deflated .npz that unpacks 960 MiB
  entries        a zip of 1,000,000 empty entries; also the slowest of the small, valid
                 requests another client sent meanwhile
  slowloris      N connections (from 127.0.0.2) send their headers and one byte of a body,
                 then nothing; a good client (127.0.0.1) then sends valid requests: their
                 statuses and seconds, and what the server answered the bad connections and
                 how many it closed within --hold seconds
  slowheaders    the same, the bad connections sending half a header line
  concurrent     8 requests at once, each unpacking --unpack-mib (400 MiB from 5 MB: under the ratio cap):
                 their statuses and the server's peak RSS growth (not run unless named)
  latency        2000 small valid requests in a row on one connection: median and p99 (not
                 run unless named)

--route listener (default) serves a fake ingress (cleave.serve.Ingress over an echoing part, no
Ray) in a child process on the ingress's own listener; --route serve starts a local Ray, deploys
the same ingress as a Serve application (its part a Serve deployment) and attacks Serve's
route (peak RSS then is the ingress replica's). Each case prints one JSON line.
--package DIR takes the `cleave` package (with `cleave/serve`) from DIR instead of the installed
one: a copy of another revision, to measure before and after.
"""

import argparse
import http.client
import io
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib

import numpy as np

HERE = os.path.abspath(__file__)
SPECS = {"a": ["float32", [None, None]], "b": ["float32", [None, None]]}


# ---------------------------------------------------------------------------- archives


def npy_header(descr, shape):
    header = ("{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)).encode()
    header = header + b" " * ((-(10 + len(header) + 1)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header


def npy(a):
    f = io.BytesIO()
    np.save(f, a)
    return f.getvalue()


LOCAL = struct.Struct("<4s5H3L2H")


class Zip:
    """A zip written by hand, so that its records may say what a crafted one says."""

    def __init__(self):
        self.out = bytearray()
        self.cd = []

    def add(self, name, chunks, deflate=False):
        """`chunks`: the member's bytes, or an iterable of them (deflated as they come)."""
        if isinstance(chunks, (bytes, bytearray)):
            chunks = [chunks]
        crc, usize, packed = 0, 0, []
        comp = zlib.compressobj(9, zlib.DEFLATED, -15) if deflate else None
        for c in chunks:
            crc = zlib.crc32(c, crc)
            usize += len(c)
            packed.append(comp.compress(c) if comp else bytes(c))
        if comp:
            packed.append(comp.flush())
        data = b"".join(packed)
        self.entry(name, data, 8 if deflate else 0, crc, usize)

    def entry(self, name, data, method, crc, usize, at=None):
        """A member whose data is `data` (already packed by `method`), written here, or only
        named in the directory at offset `at` when given."""
        n = name.encode()
        if at is None:
            at = len(self.out)
            self.out += LOCAL.pack(b"PK\x03\x04", 20, 0, method, 0, 0x21, crc, len(data), usize, len(n), 0)
            self.out += n + data
        self.cd.append(
            struct.pack("<4s4B4HL2L5H2L", b"PK\x01\x02", 20, 0, 20, 0, 0, method, 0, 0x21, crc, len(data), usize,
                        len(n), 0, 0, 0, 0, 0, at) + n
        )

    def local(self, name, data, crc):
        n = name.encode()
        return LOCAL.pack(b"PK\x03\x04", 20, 0, 0, 0, 0x21, crc, len(data), len(data), len(n), 0) + n + data

    def finish(self, comment=b""):
        cd = b"".join(self.cd)
        count = min(len(self.cd), 0xFFFF)
        end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, count, count, len(cd), len(self.out), len(comment))
        return bytes(self.out) + cd + end + comment


def zeros_chunks(nbytes, header, chunk=1 << 24):
    yield header
    left = nbytes
    block = bytes(min(chunk, nbytes))
    while left > 0:
        yield block[: min(chunk, left)]
        left -= min(chunk, left)


def body_negative_dims():
    """Entry 'a' (first in the directory) says shape (-1, 2**34): its size, -64 GiB, took the
    budget below zero; its record lies in the end record's comment, so its data ends with the
    body and numpy reads it as an empty array. Entry 'b' then deflates 1.5 GiB of zeros."""
    z = Zip()
    nb = 3 << 29  # 1.5 GiB
    header_b = npy_header("<f4", (nb // 4, 1))
    z.add("b.npy", zeros_chunks(nb, header_b), deflate=True)
    cd_b = z.cd.pop()
    header_a = npy_header("<f4", (-1, 1 << 34))
    crc = zlib.crc32(header_a)
    # 'a' sits in the comment after the end record: its offset is known once the directory is.
    name = b"a.npy"
    cd_a_len = 46 + len(name)
    at = len(z.out) + cd_a_len + len(cd_b) + 22
    z.entry("a.npy", header_a, 0, crc, len(header_a), at=at)
    z.cd.append(cd_b)
    return z.finish(comment=z.local("a.npy", header_a, crc))


def body_bomb():
    """960 MiB of float32 zeros as 'b', deflated (about 0.98 MB), and a small 'a'."""
    z = Zip()
    z.add("a.npy", npy(np.zeros((1, 4), np.float32)), deflate=True)
    nb = 960 << 20
    z.add("b.npy", zeros_chunks(nb, npy_header("<f4", (nb // 4, 1))), deflate=True)
    return z.finish()


def body_entries(n=1_000_000):
    """`n` empty stored entries, then nothing the model takes."""
    z = Zip()
    for i in range(n):
        z.entry(f"e{i}.npy", b"", 0, 0, 0)
    return z.finish()


def body_under_ratio(nbytes=400 << 20):
    """`nbytes` of float32 as 'b' that deflate about 80 times (zeros with a random byte every
    256): under CLEAVE_MAX_NPZ_RATIO, so only the in-flight budget bounds several at once."""
    rng = np.random.default_rng(0)
    block = bytearray(4 << 20)
    block[::256] = rng.integers(1, 255, len(block[::256]), dtype=np.uint8).tobytes()
    block = bytes(block)

    def chunks():
        yield npy_header("<f4", (nbytes // 4, 1))
        for _ in range(nbytes // len(block)):
            yield block

    z = Zip()
    z.add("a.npy", npy(np.zeros((1, 4), np.float32)), deflate=True)
    z.add("b.npy", chunks(), deflate=True)
    return z.finish()


def body_ok():
    buf = io.BytesIO()
    np.savez(buf, a=np.ones((2, 3), np.float32), b=np.ones((3, 2), np.float32))
    return buf.getvalue()


# ---------------------------------------------------------------------------- the server


class EchoResponse:
    def __init__(self, coro):
        import asyncio

        self.task = asyncio.ensure_future(coro)

    def __await__(self):
        return self.task.__await__()

    def cancel(self):
        self.task.cancel()


class EchoMethod:
    def __init__(self, f):
        self.f = f

    def remote(self, *args):
        async def call():
            return self.f(*args)

        return EchoResponse(call())


class EchoPart:
    """A part that answers the shapes it was given: the model is not what is measured."""

    def __init__(self):
        self.inputs = EchoMethod(lambda: SPECS)
        self.describe = EchoMethod(lambda: {"deployment": "part1_cpu", "backend": "cpu"})

    def __call__(self, feeds, budget_s=None, *upstream):
        return answer(feeds)

    def remote(self, feeds, budget_s=None, *upstream):
        async def call():
            return answer(feeds)

        return EchoResponse(call())


def answer(feeds):
    shapes = np.array([d for n in sorted(feeds) for d in np.shape(feeds[n])], np.int64)
    return {"outputs": {"y": shapes},
            "parts": {"part1_cpu": {"deployment": "part1_cpu", "backend": "cpu", "compute_s": 0.0}}}


META = {"name": "abuse", "digest": "-", "inputs": ["a", "b"], "outputs": ["y"],
        "parts": [{"inputs": ["a", "b"], "outputs": ["y"], "backend": "cpu", "deployment": "part1_cpu"}]}


def run_server():
    """The fake ingress on its own listener, in this process; prints its port, serves until
    stdin closes."""
    import asyncio

    from cleave import serve

    async def main():
        meta = dict(META, listen={"host": "0.0.0.0", "port": 0})
        ingress = serve.Ingress(meta, 60, {"kind": "handles"}, EchoPart())
        ingress.listener.start()
        for _ in range(100):  # bound at once, listening once uvicorn has started
            try:
                _, w = await asyncio.open_connection("127.0.0.1", ingress.listener.port)
                w.close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        print(f"PORT {ingress.listener.port}", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        ingress.listener.close()
        await asyncio.sleep(0.3)

    try:  # as Ray runs an ingress replica's loop where uvloop is installed
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    asyncio.run(main())


class Server:
    def __init__(self, package, route, env=None):
        self.route, self.proc = route, None
        child_env = dict(os.environ, **(env or {}))
        if package:
            child_env["PYTHONPATH"] = package + os.pathsep + child_env.get("PYTHONPATH", "")
        self.log = open(os.path.join(os.environ.get("TMPDIR", "/tmp"), f"serve_abuse.{os.getpid()}.log"), "w")
        self.proc = subprocess.Popen([sys.executable, HERE, "_server" if route == "listener" else "_serve_route"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=child_env,
                                     text=True)
        line = ""
        while not line.startswith("PORT "):
            line = self.proc.stdout.readline()
            if not line:
                raise SystemExit(f"the server did not start (see {self.log.name})")
        self.port = int(line.split()[1])
        self.pid = int(line.split()[2]) if len(line.split()) > 2 else self.proc.pid

    def reset_peak(self):
        with open(f"/proc/{self.pid}/clear_refs", "w") as f:
            f.write("5")

    def rss(self, field):
        with open(f"/proc/{self.pid}/status") as f:
            for ln in f:
                if ln.startswith(field + ":"):
                    return int(ln.split()[1]) / 1024  # MiB
        return float("nan")

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def run_serve_route():
    """A local Ray with Serve; the fake ingress deployed as an application, its part a Serve
    deployment. Prints Serve's port (and the ingress replica's pid); serves until stdin closes."""
    import ray
    from ray import cloudpickle, serve

    import cleave.serve as cs

    cloudpickle.register_pickle_by_value(cs)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    port = 18000 + os.getpid() % 1000
    serve.start(http_options={"host": "127.0.0.1", "port": port})

    @serve.deployment(name="part1_cpu", max_ongoing_requests=64)
    class Part:
        async def __call__(self, feeds, budget_s=None, *upstream):
            return answer(feeds)

        def inputs(self):
            return SPECS

        def describe(self):
            return {"deployment": "part1_cpu", "backend": "cpu", "pid": os.getpid()}

    ingress = serve.deployment(cs.Ingress, name="ingress", num_replicas=1,
                               max_ongoing_requests=getattr(cs.ingress, "INGRESS_MAX_ONGOING", 64))
    meta = dict(META, listen=None)
    handle = serve.run(ingress.bind(meta, 60, {"kind": "handles"}, Part.bind()), name="abuse", route_prefix="/abuse")
    pid = handle.describe.remote().result(timeout_s=60)["ingress"]["pid"]
    print(f"PORT {port} {pid}", flush=True)
    sys.stdin.read()
    serve.shutdown()
    ray.shutdown()


# ---------------------------------------------------------------------------- the client


def post(port, body, path="/abuse", timeout=120, source=None):
    t = time.perf_counter()
    src = (source, 0) if source else None
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=src)
    try:
        conn.request("POST", path, body=body, headers={"content-type": "application/octet-stream"})
        r = conn.getresponse()
        data = r.read()
        text = "(an .npz)" if r.status == 200 else data[:300].decode(errors="replace")
        return r.status, time.perf_counter() - t, text
    except Exception as e:  # noqa: BLE001 - a reset, a timeout: what the client saw
        return type(e).__name__, time.perf_counter() - t, str(e)[:200]
    finally:
        conn.close()


def big_case(server, name, body):
    """One bad request; meanwhile a good client's requests, one every 50 ms."""
    ok = body_ok()
    server.reset_peak()
    base = server.rss("VmRSS")
    lat, stop = [], threading.Event()

    def good():
        while not stop.is_set():
            status, s, _ = post(server.port, ok, timeout=60)
            lat.append((status, s))
            time.sleep(0.05)

    th = threading.Thread(target=good)
    th.start()
    time.sleep(0.3)
    status, seconds, text = post(server.port, body)
    time.sleep(0.2)
    stop.set()
    th.join()
    peak = server.rss("VmHWM")
    others = [s for st, s in lat]
    return {
        "case": name, "body_bytes": len(body), "status": status, "seconds": round(seconds, 3),
        "peak_rss_growth_mib": round(peak - base, 1), "reason": text.strip()[:200],
        "others": {"requests": len(lat), "statuses": sorted({str(st) for st, _ in lat}),
                   "slowest_s": round(max(others), 3) if others else None},
    }


def slowloris(server, n, hold, partial=False, good_requests=20):
    """`n` connections from 127.0.0.2 that send their headers and one byte of a 1000-byte body
    (or, `partial`, half a header line), then nothing."""
    socks, refused, why = [], 0, None
    head = (b"POST /abuse HTTP/1.1\r\nhost: x\r\ncontent-type: application/octet-stream\r\n"
            b"content-length: 1000\r\n\r\nP")
    if partial:
        head = b"POST /abuse HTTP/1.1\r\nhost: x\r\nx-slow: "
    for _ in range(n):
        s = socket.socket()
        s.settimeout(5)
        try:
            s.bind(("127.0.0.2", 0))
            s.connect(("127.0.0.1", server.port))
            s.sendall(head)
            socks.append(s)
        except OSError as e:
            refused += 1
            why = why or str(e)
            s.close()
    time.sleep(1.0)
    t0 = time.monotonic()
    ok = body_ok()
    results = [post(server.port, ok, timeout=15) for _ in range(good_requests)]
    statuses = {}
    for st, _, _ in results:
        statuses[str(st)] = statuses.get(str(st), 0) + 1
    # What the server did with the bad connections: answered (the status line) and closed.
    closed_at, answers = {}, {}
    for s in socks:
        s.setblocking(False)
    end = t0 + hold
    while time.monotonic() < end and len(closed_at) < len(socks):
        for i, s in enumerate(socks):
            if i in closed_at:
                continue
            try:
                while True:
                    data = s.recv(65536)
                    if not data:
                        closed_at[i] = time.monotonic() - t0
                        break
                    if i not in answers:
                        line, _, rest = data.partition(b"\r\n")
                        said = rest.partition(b"\r\n\r\n")[2][:80]
                        answers[i] = f"{line.decode(errors='replace')} {said.decode(errors='replace')}".strip()
            except BlockingIOError:
                pass
            except OSError:
                closed_at[i] = time.monotonic() - t0
        time.sleep(0.2)
    for s in socks:
        s.close()
    after = post(server.port, ok, timeout=15)
    said = {}
    for line in answers.values():
        said[line] = said.get(line, 0) + 1
    return {
        "case": "slowheaders" if partial else "slowloris", "route": server.route, "bad_connections": n,
        "not_connected": refused, "why_not": why,
        "good_statuses": statuses, "good_slowest_s": round(max(s for _, s, _ in results), 3),
        "watched_s": hold, "bad_answered": said, "bad_closed": len(closed_at),
        "last_bad_closed_at_s": round(max(closed_at.values()), 1) if closed_at else None,
        "good_after": [after[0], round(after[1], 3)],
    }

def concurrent(server, n=8, mib=400):
    """`n` requests at once, each unpacking `mib` MiB from about 1/80 of that: statuses,
    seconds and the server's peak RSS growth."""
    body = body_under_ratio(mib << 20)
    server.reset_peak()
    base = server.rss("VmRSS")
    out = [None] * n

    def one(i):
        out[i] = post(server.port, body, timeout=300)

    t = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    statuses = {}
    for st, _, _ in out:
        statuses[str(st)] = statuses.get(str(st), 0) + 1
    return {"case": "concurrent", "requests": n, "body_bytes": len(body), "unpacks_mib_each": mib,
            "statuses": statuses, "seconds": round(time.perf_counter() - t, 2),
            "peak_rss_growth_mib": round(server.rss("VmHWM") - base, 1),
            "refusal": next((text[:160] for st, _, text in out if st != 200), None)}


def latency(server, n=2000):
    """`n` small valid requests one after another on one kept-alive connection: what the
    limits cost a request that meets none of them."""
    ok = body_ok()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    lat = []
    for _ in range(n):
        t = time.perf_counter()
        conn.request("POST", "/abuse", body=ok, headers={"content-type": "application/octet-stream"})
        r = conn.getresponse()
        r.read()
        lat.append(time.perf_counter() - t)
        assert r.status == 200, r.status
    conn.close()
    lat.sort()
    return {"case": "latency", "requests": n, "median_ms": round(1e3 * lat[n // 2], 3),
            "p99_ms": round(1e3 * lat[int(n * 0.99)], 3)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--package", help="a folder holding the `cleave` package to measure (default: the installed one)")
    p.add_argument("--route", choices=["listener", "serve"], default="listener")
    p.add_argument("--cases", default="negative-dims,bomb,entries,slowloris,slowheaders")
    p.add_argument("--connections", type=int, help="slowloris connections (default 300 on the listener, 70 on Serve's)")
    p.add_argument("--unpack-mib", type=int, default=400, help="what each concurrent request unpacks (MiB)")
    p.add_argument("--hold", type=float, default=45.0, help="seconds to watch the bad connections for closing")
    args = p.parse_args()
    cases = args.cases.split(",")
    server = Server(os.path.abspath(args.package) if args.package else None, args.route)
    out = []
    try:
        makers = {"negative-dims": body_negative_dims, "bomb": body_bomb, "entries": body_entries}
        for name in cases:
            if name in makers:
                body = makers[name]()
                r = big_case(server, name, body)
            elif name == "latency":
                r = latency(server)
            elif name == "concurrent":
                r = concurrent(server, mib=args.unpack_mib)
            elif name in ("slowloris", "slowheaders"):
                n = args.connections or (300 if args.route == "listener" else 70)
                r = slowloris(server, n, args.hold, partial=name == "slowheaders")
            else:
                raise SystemExit(f"unknown case {name!r}")
            print(json.dumps(r), flush=True)
            out.append(r)
    finally:
        server.close()
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["_server"]:
        run_server()
    elif sys.argv[1:2] == ["_serve_route"]:
        run_serve_route()
    else:
        main()
