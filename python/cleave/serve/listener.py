"""The ingress's own HTTP listener: the same route as Serve's, answered in the ingress's
process, so a request skips Serve's HTTP proxy and its hop to the replica (on 2 cores that
path costs about 40 ms of CPU a request, most of the gap to the machine's limit:
docs/figures.md, "Serve's proxy against the fast route")."""

import asyncio
import contextlib
import errno
import json
import socket
import time

from .wire import BODY_MIN_RATE, BODY_TIMEOUT_S, env_number, short_error

# The whole machine is one wildcard address: a client needs a real one.
WILDCARDS = ("", "0.0.0.0", "::")
# Open connections at once (idle keep-alive ones count); at the cap, the one idle longest is
# closed for a new one, and where none is idle the new one is answered 503 and closed. Serve's
# route queues instead; this is well above what a replica that runs 64 requests at a time
# keeps busy.
MAX_CONNECTIONS = env_number("CLEAVE_MAX_CONNECTIONS", 256)
# Of those, from one client address (the same rule at its own cap): one client cannot hold
# them all.
MAX_CONNECTIONS_PER_CLIENT = env_number("CLEAVE_MAX_CONNECTIONS_PER_CLIENT", 64)
# A request's headers must be complete within this of the connection opening, or of the
# request's first byte on a kept-alive one; else it is answered 408 and closed.
HEADER_TIMEOUT_S = env_number("CLEAVE_HEADER_TIMEOUT_S", 10.0, float)
# The most header bytes a request may send (uvicorn's httptools parser has no bound; h11 its own).
MAX_HEADER_BYTES = 64 << 10
# A fixed port may still be held by the ingress this one replaces (a redeploy, a restart):
# its process exits a while after Serve lets it go.
REBIND_S = 15.0
# As Serve's proxy keeps an idle client connection open.
KEEP_ALIVE_S = 90


def parse_ingress_port(text):
    """None for "off", else the port (0: any free one); ValueError naming the value."""
    t = str(text).strip().lower()
    if t == "off":
        return None
    try:
        port = int(t)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ValueError(f"--ingress-port {text!r}: give a port (0-65535; 0 for any free one) or 'off'")
    return port


class _Conn:
    __slots__ = ("transport", "host", "key", "since", "first_byte", "header_bytes", "headers_done", "busy", "requests")

    def __init__(self, transport, key, now):
        self.transport, self.key, self.host = transport, key, key[0] if key else "?"
        self.since, self.first_byte, self.header_bytes = now, None, 0
        self.headers_done, self.busy, self.requests = False, 0, 0


def _unsent(transport):
    """Bytes written to `transport` that the client has not taken (asyncio keeps them all)."""
    try:
        return transport.get_write_buffer_size()
    except Exception:
        return 0


def _answer_and_close(transport, status, reason, message=""):
    body = json.dumps({"error": message}).encode() if message else b""
    head = f"HTTP/1.1 {status} {reason}\r\ncontent-length: {len(body)}\r\nconnection: close\r\n"
    if body:
        head += "content-type: application/json\r\n"
    if status == 503:
        head += "retry-after: 1\r\n"
    try:
        transport.write(head.encode() + b"\r\n" + body)
    finally:
        transport.close()


class Guard:
    """The listener's connections, so that slow or idle clients cannot hold them all: at most
    `max_connections`, and `per_client` from one address (at either cap the connection idle
    longest, not in a request, is closed for the new one; with none idle the new one is
    answered 503 and closed); a request's headers must be complete within `header_timeout_s`
    (408 and closed), and a connection kept alive is closed after `keep_alive_s` idle. A
    request's body and reply are timed by the ingress and the listener's app."""

    def __init__(self, max_connections, per_client, header_timeout_s, keep_alive_s, clock=time.monotonic):
        self.max, self.per_client = max_connections, per_client
        self.header_timeout_s, self.keep_alive_s = header_timeout_s, keep_alive_s
        self.clock = clock
        self.conns = {}  # protocol -> _Conn
        self.by_key = {}  # (host, port) -> _Conn: the app finds its connection by the scope's client
        self.per_host = {}
        self.counts = {"refused": 0, "evicted": 0, "slow_headers": 0, "idle": 0, "slow_replies": 0}

    def opened(self, proto, transport, key):
        host = key[0] if key else "?"
        if self.per_host.get(host, 0) >= self.per_client and not self._evict(host):
            self.counts["refused"] += 1
            _answer_and_close(
                transport,
                503,
                "Service Unavailable",
                f"{host} has {self.per_host[host]} connections open, the most one client may "
                "(CLEAVE_MAX_CONNECTIONS_PER_CLIENT)",
            )
            return
        if len(self.conns) >= self.max and not self._evict(None):
            self.counts["refused"] += 1
            _answer_and_close(
                transport,
                503,
                "Service Unavailable",
                f"the ingress has {len(self.conns)} connections open, all in requests, the most it keeps "
                "(CLEAVE_MAX_CONNECTIONS)",
            )
            return
        c = _Conn(transport, key, self.clock())
        self.conns[proto] = c
        if key:
            self.by_key[key] = c
        self.per_host[c.host] = self.per_host.get(c.host, 0) + 1

    def closed(self, proto):
        c = self.conns.pop(proto, None)
        if c is None:
            return
        if c.key and self.by_key.get(c.key) is c:
            del self.by_key[c.key]
        n = self.per_host.get(c.host, 1) - 1
        if n:
            self.per_host[c.host] = n
        else:
            self.per_host.pop(c.host, None)

    def _evict(self, host):
        """Closes the connection idle longest (of `host`'s, when given); False if none is idle."""
        idle = [(c.since, p) for p, c in self.conns.items() if not c.busy and (host is None or c.host == host)]
        if not idle:
            return False
        _, proto = min(idle, key=lambda t: t[0])
        self._close(proto, "evicted")
        return True

    def _close(self, proto, why, answer=None):
        c = self.conns.get(proto)
        if c is None:
            return
        self.counts[why] += 1
        self.closed(proto)
        if _unsent(c.transport):
            # close() would wait for a client that does not read: the bytes are dropped.
            c.transport.abort()
        elif answer:
            _answer_and_close(c.transport, *answer)
        else:
            c.transport.close()

    def data(self, proto, n, tracks_headers):
        """`n` bytes arrived (after the parser took them)."""
        c = self.conns.get(proto)
        if c is None or c.busy or c.headers_done:
            return
        if c.first_byte is None:
            c.first_byte = self.clock()
        if tracks_headers:
            c.header_bytes += n
            if c.header_bytes > MAX_HEADER_BYTES:
                self._close(proto, "slow_headers", (431, "Request Header Fields Too Large"))

    def headers_done(self, proto):
        c = self.conns.get(proto)
        if c is not None:
            c.headers_done = True

    def started(self, key):
        c = self.by_key.get(key) if key else None
        if c is not None:
            c.busy += 1
            c.requests += 1
        return c

    def ended(self, c):
        if c is not None:
            c.busy -= 1
            c.since = self.clock()
            c.first_byte, c.header_bytes, c.headers_done = None, 0, False

    def drop(self, c, why):
        for proto, other in list(self.conns.items()):
            if other is c:
                self._close(proto, why)

    def sweep(self):
        """Closes connections whose request's headers are late, and those idle too long."""
        now = self.clock()
        for proto, c in list(self.conns.items()):
            if c.transport.is_closing():
                self.closed(proto)
            elif c.busy:
                continue
            elif c.first_byte is not None or c.headers_done:
                # (headers done and no request running: the app was never called for them)
                if now - (c.first_byte if c.first_byte is not None else c.since) > self.header_timeout_s:
                    self._close(proto, "slow_headers", (408, "Request Timeout"))
            elif now - c.since > (self.keep_alive_s if c.requests else self.header_timeout_s):
                self._close(proto, "idle")

    def describe(self):
        return {"open": len(self.conns), "closed": dict(self.counts)}


def guarded_protocol(base, guard):
    """uvicorn's HTTP protocol class `base`, reporting to `guard` as connections open, take
    bytes, finish a request's headers (httptools' parser says when; h11 bounds its own
    headers) and close."""
    tracks_headers = hasattr(base, "on_headers_complete")

    class Guarded(base):
        def connection_made(self, transport):
            super().connection_made(transport)
            key = getattr(self, "client", None)
            if key is None:
                peer = transport.get_extra_info("peername")
                key = (str(peer[0]), int(peer[1])) if isinstance(peer, (tuple, list)) and len(peer) >= 2 else None
            guard.opened(self, transport, key)

        def data_received(self, data):
            super().data_received(data)
            guard.data(self, len(data), tracks_headers)

        def connection_lost(self, exc):
            guard.closed(self)
            super().connection_lost(exc)

        if tracks_headers:

            def on_headers_complete(self):
                guard.headers_done(self)
                super().on_headers_complete()

    Guarded.__name__ = Guarded.__qualname__ = f"Guarded{base.__name__}"
    return Guarded


def _bind(host, port):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


class Listener:
    """A socket bound when the ingress is built (so a fixed port that stays in use fails the
    deployment with the reason) and served, once the ingress's event loop runs, by uvicorn
    (which Serve's own proxy runs on) calling `handler(request)` for every request, whatever
    its path. An address this node does not have (the ingress placed on another node than
    --http-host names) leaves it without a listener, said in `describe`: Serve's route
    still serves."""

    def __init__(self, host, port, handler):
        self.host = host
        self.port = port
        self.handler = handler
        self.sock = None
        self.task = None
        self.server = None
        self.guard = None
        self.error = None
        end = time.monotonic() + (REBIND_S if port else 0.0)
        while True:
            try:
                self.sock = _bind(host, port)
                break
            except OSError as e:
                if e.errno == errno.EADDRINUSE and time.monotonic() < end:
                    time.sleep(0.5)
                    continue
                why = f"cannot listen on {host}:{port}: {e.strerror or e}"
                if e.errno == errno.EADDRNOTAVAIL:
                    self.error = f"{why} (not an address of the ingress's node; --http-host 0.0.0.0 listens on all)"
                    return
                raise RuntimeError(
                    f"the ingress {why} (give another --ingress-port, 0 for any free one, or 'off')"
                ) from None
        self.port = self.sock.getsockname()[1]

    def start(self):
        """Serves from the running event loop; a no-op once started, or without a socket."""
        if self.task is None and self.sock is not None:
            self.task = asyncio.get_running_loop().create_task(self._serve())

    async def _serve(self):
        import uvicorn
        from starlette.requests import Request

        handler = self.handler
        guard = self.guard = Guard(MAX_CONNECTIONS, MAX_CONNECTIONS_PER_CLIENT, HEADER_TIMEOUT_S, KEEP_ALIVE_S)

        async def app(scope, receive, send):
            if scope["type"] != "http":
                return
            conn = guard.started(scope.get("client"))
            try:
                response = await handler(Request(scope, receive))
                # The reply must leave at the rate a body must arrive, or the connection is
                # dropped: a client that does not read its reply holds it (asyncio buffers it
                # all, and send returns at once) for no longer than that.
                size = len(getattr(response, "body", b"") or b"")
                loop = asyncio.get_running_loop()
                due = loop.time() + BODY_TIMEOUT_S + size / BODY_MIN_RATE
                # A timer, not a timeout task a request: dropping the connection ends a send
                # that waits, and empties what asyncio holds unsent.
                # A stream (server-sent tokens) is paced by its producer, not bounded so.
                timed = conn is not None and hasattr(response, "body")
                late = loop.call_at(due, guard.drop, conn, "slow_replies") if timed else None
                try:
                    await response(scope, receive, send if timed or conn is None else paced(send, conn))
                    while conn is not None and _unsent(conn.transport) and loop.time() < due + 1.0:
                        await asyncio.sleep(0.05)
                finally:
                    if late is not None:
                        late.cancel()
            finally:
                guard.ended(conn)

        def paced(send, conn):
            """`send` for a stream: a piece the client does not take within BODY_TIMEOUT_S
            (it stopped reading) drops the connection, which ends the stream and frees what
            it holds (a decoder's sequence)."""

            async def timed_send(message):
                try:
                    await asyncio.wait_for(send(message), BODY_TIMEOUT_S)
                except asyncio.TimeoutError:
                    guard.drop(conn, "slow_replies")
                    raise

            return timed_send

        class Server(uvicorn.Server):
            # Signals belong to the Ray worker that hosts the ingress, never to uvicorn.
            def capture_signals(self):
                return contextlib.nullcontext()

            def install_signal_handlers(self):  # uvicorn before 0.29
                pass

        try:
            from uvicorn.protocols.http.auto import AutoHTTPProtocol

            http = guarded_protocol(AutoHTTPProtocol, guard)
            limit = None  # the guard's caps
        except ImportError:  # an uvicorn laid out otherwise: its own cap, no guard
            http, limit = "auto", MAX_CONNECTIONS
        config = uvicorn.Config(
            app,
            http=http,
            lifespan="off",
            log_config=None,
            access_log=False,
            limit_concurrency=limit,
            timeout_keep_alive=KEEP_ALIVE_S,
            # No upgrade takes a connection away from the guard: the route is plain HTTP.
            ws="none",
            # The client is the peer: a header must not name another (the per-client caps).
            proxy_headers=False,
        )
        self.server = Server(config)
        sweeper = asyncio.get_running_loop().create_task(self._sweep(guard))
        try:
            await self.server.serve(sockets=[self.sock])
            self.error = "stopped"
        except Exception as e:
            self.error = short_error(e) or type(e).__name__
            self.sock.close()
        finally:
            sweeper.cancel()

    @staticmethod
    async def _sweep(guard):
        while True:
            await asyncio.sleep(min(1.0, guard.header_timeout_s / 4))
            guard.sweep()

    def close(self):
        """Stops serving (call on its loop) and lets the port go."""
        if self.server is not None:
            self.server.should_exit = True
        elif self.sock is not None:
            self.sock.close()

    def address(self):
        """(host a client uses, port): on a wildcard, this node's address."""
        return (_node_ip() if self.host in WILDCARDS else self.host), self.port

    def describe(self):
        host, port = self.address()
        out = {"host": host, "port": port, "bound": f"{self.host}:{self.port}", "node_ip": _node_ip()}
        if self.guard is not None:
            out["connections"] = self.guard.describe()
        if self.error:
            out["error"] = self.error
        elif self.task is None:
            out["state"] = "not started"
        return out


def _node_ip():
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:
        return socket.gethostname()


def is_loopback(host):
    return host in ("localhost", "::1") or str(host).startswith("127.")
