"""OpenAI's ``POST /v1/completions`` over a decoder's stages: the prompt as text (where a
``tokenizer.json`` sits beside the model) or as token ids, greedy or sampled, whole or streamed
as server-sent events (``stream: true``), ``max_tokens`` and stop tokens as OpenAI clients
send them. ``GET /v1/models`` names the one model. Errors are OpenAI's error objects, with the
status a client retries on (429) or must shorten for (413)."""

import asyncio
import json
import time
import uuid

# At the top, never inside a function: Ray ships this package to other nodes by value.
from .generation import Generation, StageLost, StageTimeout
from .runtime import extension

# What one request may ask for at most, whatever the stages allow.
MAX_TOKENS_CAP = 4096
MAX_REQUEST_BYTES = 1 << 20


class BadRequest(Exception):
    def __init__(self, message, status=400, kind="invalid_request_error"):
        super().__init__(message)
        self.status, self.kind = status, kind


def error_body(message, kind="invalid_request_error", code=None):
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


class Completions:
    """The route's logic, independent of the HTTP server: ``parse`` a body into a request,
    ``stream`` its chunks. `stages` are the decoder's stage transports."""

    def __init__(self, decoder, stages, model_name, codec=None, max_context=0):
        self.decoder, self.stages, self.model_name, self.codec = decoder, stages, model_name, codec
        self.max_context = max_context
        self.active = 0
        self.served = 0
        self.tokens = 0
        self.started = time.monotonic()

    def parse(self, body):
        try:
            req = json.loads(body or b"{}")
        except ValueError as e:
            raise BadRequest(f"the body is not JSON: {e}") from None
        if not isinstance(req, dict):
            raise BadRequest("the body is not a JSON object")
        prompt = req.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # OpenAI's batch of one
        if isinstance(prompt, str):
            if self.codec is None:
                raise BadRequest(
                    "the prompt is text but no tokenizer.json sits beside the model: send token ids, or put one there"
                )
            ids = [int(t) for t in self.codec.encode(prompt)]
        elif (
            isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
        ):
            ids = list(prompt)
        else:
            raise BadRequest("'prompt' must be text or a non-empty list of token ids")
        if not ids:
            raise BadRequest("the prompt has no token")
        max_tokens = req.get("max_tokens", 16)
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or not 1 <= max_tokens <= MAX_TOKENS_CAP:
            raise BadRequest(f"'max_tokens' {max_tokens!r}: give a whole number from 1 to {MAX_TOKENS_CAP}")
        if self.max_context and len(ids) + max_tokens > self.max_context:
            raise BadRequest(
                f"the prompt's {len(ids)} tokens and max_tokens {max_tokens} pass the {self.max_context} tokens of "
                "context the stages keep: shorten one",
                413,
                "context_length_exceeded",
            )
        stop = req.get("stop_token_ids") or []
        if not isinstance(stop, list) or not all(isinstance(t, int) for t in stop):
            raise BadRequest("'stop_token_ids' must be a list of token ids")
        if req.get("stop"):
            raise BadRequest("'stop' strings are not supported: give 'stop_token_ids'")
        if req.get("n", 1) != 1:
            raise BadRequest("'n' above 1 is not supported: send one request per completion")
        try:
            sampler = extension().Sampler(
                float(req.get("temperature", 0.0)),
                # vLLM's "no top-k" is -1.
                max(0, int(req.get("top_k", 0) or 0)),
                float(req.get("top_p", 1.0)),
                int(req.get("seed", 0) or 0),
            )
        except (TypeError, ValueError) as e:
            raise BadRequest(f"sampling: {e}") from None
        except Exception as e:  # cleave.ArgumentError from the sampler's own checks
            raise BadRequest(f"sampling: {getattr(e, 'cause', e)}") from None
        return {
            "ids": ids,
            "max_tokens": max_tokens,
            "stop": stop,
            "sampler": sampler,
            "stream": bool(req.get("stream", False)),
            "echo_ids": bool(req.get("return_token_ids", False)),
        }

    def generation(self, request):
        return Generation(
            self.decoder, self.stages, request["ids"], request["max_tokens"], request["stop"], request["sampler"]
        )

    async def chunks(self, request, generation):
        """(text piece, token, finish_reason or None) for each token."""
        said = ""
        self.active += 1
        tokens = generation.__aiter__()
        try:
            async for token in tokens:
                self.tokens += 1
                text = ""
                if self.codec is not None:
                    whole = self.codec.decode(generation.produced)
                    # A token that ends inside a character waits for the next.
                    if not whole.endswith("\ufffd"):
                        text, said = whole[len(said) :], whole
                yield text, token, generation.finish_reason
        finally:
            # Closed early (a client gone): the generation's own close frees its caches now,
            # not when the collector gets to it.
            await tokens.aclose()
            self.active -= 1
            self.served += 1

    def chunk(self, cid, created, text, tokens, finish):
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "token_ids": tokens}
        return {
            "id": cid,
            "object": "text_completion",
            "created": created,
            "model": self.model_name,
            "choices": [choice],
        }

    async def complete(self, request):
        """The whole completion as one object."""
        gen = self.generation(request)
        text, tokens, finish = [], [], None
        async for piece, token, finished in self.chunks(request, gen):
            finish = finished
            text.append(piece)
            tokens.append(token)
        body = self.chunk(f"cmpl-{uuid.uuid4().hex}", int(time.time()), "".join(text), tokens, finish)
        n = len(request["ids"])
        body["usage"] = {"prompt_tokens": n, "completion_tokens": len(tokens), "total_tokens": n + len(tokens)}
        return body

    def models(self):
        return {"object": "list", "data": [{"id": self.model_name, "object": "model", "owned_by": "cleave"}]}


def cause_of(e):
    """The exception a stage raised, out of the layers Ray wraps it in (their ``cause``; a
    cleave error's own ``cause`` is its message, a string)."""
    for _ in range(8):
        inner = getattr(e, "cause", None)
        if not isinstance(inner, BaseException):
            break
        e = inner
    return e


def message_of(e):
    said = getattr(e, "cause", None)
    return said if isinstance(said, str) else (str(e).strip().splitlines() or [type(e).__name__])[-1]


def status_of(e):
    """(HTTP status, OpenAI error body) for a failure of a completion."""
    if isinstance(e, BadRequest):
        return e.status, error_body(str(e), e.kind)
    e = cause_of(e)
    status = getattr(e, "status", None)
    if isinstance(status, int) and status in (413, 429):
        kind = "rate_limit_exceeded" if status == 429 else "context_length_exceeded"
        return status, error_body(message_of(e), kind, kind)
    if isinstance(e, StageLost):
        return 503, error_body(f"a stage stayed unavailable: {e}", "server_error")
    if isinstance(e, StageTimeout):
        return 503, error_body(str(e), "server_error")
    return 500, error_body(f"{type(e).__name__}: {message_of(e)}", "server_error")


async def handle(completions, request):
    """A starlette request to the route's response (a stream for ``stream: true``)."""
    from starlette.responses import JSONResponse, StreamingResponse

    path = request.url.path.rstrip("/")
    if path.endswith("/v1/models") and request.method == "GET":
        return JSONResponse(completions.models())
    if not path.endswith("/v1/completions"):
        return JSONResponse(error_body(f"no route {request.method} {path}: POST /v1/completions"), status_code=404)
    if request.method != "POST":
        return JSONResponse(error_body("POST a JSON body to /v1/completions"), status_code=405)
    body = b""
    async for part in request.stream():
        body += part
        if len(body) > MAX_REQUEST_BYTES:
            return JSONResponse(error_body(f"the body is over {MAX_REQUEST_BYTES} bytes"), status_code=413)
    try:
        req = completions.parse(body)
    except BadRequest as e:
        return JSONResponse(*reversed(status_of(e)))
    if not req["stream"]:
        try:
            return JSONResponse(await completions.complete(req))
        except Exception as e:
            status, err = status_of(e)
            return JSONResponse(err, status_code=status)
    gen = completions.generation(req)
    stream = completions.chunks(req, gen)
    # The first token decides the status: a refused request is answered as an error, not as
    # a stream that fails.
    try:
        first = await stream.__anext__()
    except Exception as e:
        await stream.aclose()
        status, err = status_of(e)
        return JSONResponse(err, status_code=status)
    cid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())

    async def events():
        try:
            piece = first
            while True:
                text, token, finish = piece
                yield f"data: {json.dumps(completions.chunk(cid, created, text, [token], finish))}\n\n"
                if finish is not None:
                    break
                try:
                    piece = await stream.__anext__()
                except StopAsyncIteration:
                    break
                except Exception as e:
                    _, err = status_of(e)
                    yield f"data: {json.dumps(err)}\n\n"
                    break
            # The caches are freed before the client hears the end, so that its next request
            # finds their place free.
            await stream.aclose()
            yield "data: [DONE]\n\n"
        finally:
            # A client gone mid-stream: the generation stops and its caches are freed.
            await stream.aclose()

    return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def serve_local(completions, host="127.0.0.1", port=0):
    """The route on uvicorn in this process (tests and `python -m`): returns (server, port)."""
    import socket

    import uvicorn
    from starlette.requests import Request

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        response = await handle(completions, Request(scope, receive))
        await response(scope, receive, send)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    config = uvicorn.Config(app, lifespan="off", log_config=None, access_log=False, ws="none")
    server = uvicorn.Server(config)
    asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    return server, sock.getsockname()[1]
