"""The ingress's own HTTP listener: the same route as Serve's, answered in the ingress's
process, so a request skips Serve's HTTP proxy and its hop to the replica (on 2 cores that
path costs about 40 ms of CPU a request, most of the gap to the machine's limit:
docs/serving.md, Measuring)."""

import asyncio
import contextlib
import socket

from .wire import short_error

# The whole machine is one wildcard address: a client needs a real one.
WILDCARDS = ("", "0.0.0.0", "::")


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


class Listener:
    """A socket bound when the ingress is built (so a port in use fails the deployment with
    the reason) and served, once the ingress's event loop runs, by uvicorn (which Serve's own
    proxy runs on) calling `handler(request)` for every request, whatever its path."""

    def __init__(self, host, port, handler, limit):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
        except OSError as e:
            sock.close()
            raise RuntimeError(
                f"the ingress cannot listen on {host}:{port}: {e.strerror or e} "
                "(give another --ingress-port, 0 for any free one, or 'off')"
            ) from None
        self.sock = sock
        self.host = host
        self.port = sock.getsockname()[1]
        self.handler = handler
        self.limit = limit
        self.task = None
        self.server = None
        self.error = None

    def start(self):
        """Serves from the running event loop; a no-op once started."""
        if self.task is None:
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
            # Serve's max_ongoing_requests for the route: beyond it, 503.
            limit_concurrency=self.limit,
        )
        self.server = Server(config)
        try:
            await self.server.serve(sockets=[self.sock])
            self.error = "stopped"
        except Exception as e:
            self.error = short_error(e) or type(e).__name__

    def close(self):
        """Asks the server to stop; call on its loop."""
        if self.server is not None:
            self.server.should_exit = True

    def address(self):
        """(host a client uses, port): on a wildcard, this node's address."""
        host = self.host
        if host in WILDCARDS:
            try:
                import ray

                host = ray.util.get_node_ip_address()
            except Exception:
                host = socket.gethostname()
        return host, self.port

    def describe(self):
        host, port = self.address()
        out = {"host": host, "port": port, "bound": f"{self.host}:{self.port}"}
        if self.error:
            out["error"] = self.error
        elif self.task is None:
            out["state"] = "not started"
        return out
