"""The ingress's own HTTP listener: the same route as Serve's, answered in the ingress's
process, so a request skips Serve's HTTP proxy and its hop to the replica (on 2 cores that
path costs about 40 ms of CPU a request, most of the gap to the machine's limit:
docs/serving.md, Measuring)."""

import asyncio
import contextlib
import errno
import socket
import time

from .wire import short_error

# The whole machine is one wildcard address: a client needs a real one.
WILDCARDS = ("", "0.0.0.0", "::")
# Open connections at once (idle keep-alive ones count); beyond, 503. Serve's route queues
# instead; this is well above what a replica that runs 64 requests at a time keeps busy.
MAX_CONNECTIONS = 256
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

        async def app(scope, receive, send):
            if scope["type"] != "http":
                return
            response = await handler(Request(scope, receive))
            await response(scope, receive, send)

        class Server(uvicorn.Server):
            # Signals belong to the Ray worker that hosts the ingress, never to uvicorn.
            def capture_signals(self):
                return contextlib.nullcontext()

            def install_signal_handlers(self):  # uvicorn before 0.29
                pass

        config = uvicorn.Config(
            app,
            lifespan="off",
            log_config=None,
            access_log=False,
            limit_concurrency=MAX_CONNECTIONS,
            timeout_keep_alive=KEEP_ALIVE_S,
        )
        self.server = Server(config)
        try:
            await self.server.serve(sockets=[self.sock])
            self.error = "stopped"
        except Exception as e:
            self.error = short_error(e) or type(e).__name__
            self.sock.close()

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
