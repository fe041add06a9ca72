"""The HTTP side of ``ctransformer-serve``: an ASGI application over an ``AsyncEngine`` (Starlette's requests and
responses, our own routing).

``create_app(engine)`` answers, each endpoint a plain function of the ``Server`` (serve/server.py) and the request,
in the module of its API:

- LibreTranslate's (serve/libretranslate.py): ``POST /translate`` (text or HTML, with the beam's alternatives),
  ``POST /translate_file`` (.txt, .html) and ``GET /download_file/...``, ``GET /languages``, ``GET
  /frontend/settings``, so its clients work unchanged;
- ours (serve/v1_translate.py): ``POST /v1/translate`` (JSON, optionally server-sent events);
- OpenAI's (serve/openai_api.py): ``POST /v1/completions`` and ``POST /v1/chat/completions`` for a GPT (its
  continuations, optionally streamed, cut at stop strings, with logprobs, logit_bias and the penalties), a chat for a
  translator (the last user message translated), and ``GET /v1/models``;
- ``GET /openapi.json`` (serve/openapi.py), the requests' schema;
- ``GET /health``, ``GET /ready`` and ``GET /metrics`` (Prometheus) for a load balancer and a scraper;
- ``GET /``, a one-page web UI (static/index.html).

A request is parsed and checked once, into its typed object (serve/protocol.py). Every refusal is a JSON
``{"error": "..."}`` whose message names the field at fault (OpenAI's ``{"error": {"message", "type", "param",
"code"}}`` on its endpoints). The engine does the translating; this module only routes, refuses and counts. See
docs/serve.md.
"""
import asyncio
import functools
import pathlib
import sys
import time
import types

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from ctransformer.serve import libretranslate, openai_api, openapi, v1_translate
from ctransformer.serve.engine import QueueFull
from ctransformer.serve.http_io import Disconnected, HTTPError, error_response
from ctransformer.serve.server import ENTERING, Limits, Server, refusal

__all__ = ["create_app"]

# The endpoints in OpenAI's shape: their refusals are {"error": {"message", "type", "param", "code"}}.
OPENAI_PATHS = ("/v1/completions", "/v1/chat/completions", "/v1/models")
# Paths that keep answering while the server loads or drains: a balancer and a scraper must see it go.
ALWAYS_OPEN = ("/health", "/ready", "/metrics")
# Paths whose requests wait in the engine's queue: refused with 429 before their body is read when it is full.
QUEUED = ("/translate", "/translate_file", "/v1/translate", "/v1/completions", "/v1/chat/completions")
# Routes that take every path under them (the rest is an argument).
PREFIXES = ("/download_file/",)
STATIC = pathlib.Path(__file__).resolve().parent / "static"


def routes_of(server):
    """Each path's methods and their endpoints (a GET also answers HEAD)."""
    def bound(endpoint):
        return functools.partial(endpoint, server)

    return {
        "/": {"GET": bound(index)},
        "/translate": {"POST": bound(libretranslate.translate)},
        "/translate_file": {"POST": bound(libretranslate.translate_file)},
        "/download_file/": {"GET": bound(libretranslate.download_file)},   # a prefix: /download_file/KEY/NAME
        "/languages": {"GET": bound(libretranslate.list_languages)},
        "/frontend/settings": {"GET": bound(libretranslate.frontend_settings)},
        "/v1/translate": {"POST": bound(v1_translate.translate)},
        "/v1/models": {"GET": bound(openai_api.list_models)},
        "/v1/completions": {"GET": bound(openai_api.completions), "POST": bound(openai_api.completions)},
        "/v1/chat/completions": {"POST": bound(openai_api.chat_completions)},
        "/openapi.json": {"GET": bound(openapi.schema)},
        "/health": {"GET": bound(health)},
        "/ready": {"GET": bound(ready)},
        "/metrics": {"GET": bound(metrics)},
    }


def create_app(engine, api_key=None, max_texts=64, max_text_chars=5000, max_body_bytes=1 << 20,
               shutdown_timeout=30.0, max_beam_size=16, startup=None, max_new_tokens=1024, body_timeout=60.0):
    """The ASGI application serving `engine` (a ``ctransformer.serve.engine.AsyncEngine``).

    api_key: when given, translation requests must carry it (the ``api_key`` field or ``Authorization: Bearer``).
    max_texts, max_text_chars, max_body_bytes: the limits of one request (413 beyond them).
    shutdown_timeout: how long ``app.state.drain()`` waits for accepted requests by default.
    max_beam_size: the largest ``beam_size`` a request may ask for (400 beyond it).
    max_new_tokens: the largest ``max_tokens`` a completion may ask for (400 beyond it).
    body_timeout: seconds a request's body may take between two of its parts (nginx's client_body_timeout): past it
    the request gets 408 and its connection is closed, so a client that declares a body and never sends it does not
    hold a connection and a place in the queue.
    startup: an async callable run in the background when the server starts (the command line loads the
    models with it); ``/ready`` answers 503 until it returns. Without one the app is ready at once.
    """
    limits = Limits(api_key=api_key, max_texts=max_texts, max_text_chars=max_text_chars,
                    max_body_bytes=max_body_bytes, body_timeout=body_timeout, max_beam_size=max_beam_size,
                    max_new_tokens=max_new_tokens, shutdown_timeout=shutdown_timeout)
    server = Server(engine, limits, ready=startup is None)
    serving = server.serving

    async def load():   # the command line's startup, in the background; /ready says how it went
        try:
            await startup()
            serving.ready = True
        except Exception as error:  # noqa: BLE001 - reported by /ready and the command line
            serving.load_error = error

    async def drain(timeout=None):
        """Stop taking requests (503, /ready too) and wait up to `timeout` seconds (the app's shutdown_timeout by
        default) for every accepted one to be answered. True when all were."""
        timeout = limits.shutdown_timeout if timeout is None else timeout
        serving.draining = True
        deadline = time.monotonic() + timeout
        engine.start_draining()
        finished = await engine.drain(timeout)
        while serving.in_flight and time.monotonic() < deadline:   # the answers are still being written
            await asyncio.sleep(0.01)
        return bool(finished) and not serving.in_flight

    state = types.SimpleNamespace(engine=engine, serving=serving, registry=server.metrics.registry, drain=drain,
                                  server=server)
    return _App(routes_of(server), state, server.metrics.responses, load if startup is not None else None)


# --- the endpoints of the server itself -----------------------------------------------------------------------

async def health(server, request):
    return JSONResponse({"status": "ok"})


async def ready(server, request):
    serving = server.serving
    if serving.draining:
        return JSONResponse({"status": "draining"}, status_code=503)
    if not serving.ready:
        status = "failed: " + str(serving.load_error) if serving.load_error else "loading"
        return JSONResponse({"status": status}, status_code=503)
    return JSONResponse({"status": "ready"})


async def metrics(server, request):
    return Response(generate_latest(server.metrics.registry), media_type=CONTENT_TYPE_LATEST)


@functools.lru_cache(maxsize=1)
def _page():
    return (STATIC / "index.html").read_text(encoding="utf-8")


async def index(server, request):
    return HTMLResponse(_page())


class _App:
    """The ASGI application. Each request goes by its exact path (or its prefix's) and method to its endpoint, whose
    refusals (HTTPError) become JSON answers. Before that, it refuses requests while loading or draining, and a
    translation or completion with 429 before its body is read when the queue is full; it counts the requests
    inside (the drain waits for them) and every response by endpoint and status.

    The routing is ours, not a framework's: the paths are fixed, and Starlette's router and middleware layers were
    a large part of the server's Python per request, which is what limits the server when outputs are short.
    Starlette's Request and Response classes are still used."""

    def __init__(self, routes, state, responses, load):
        self.routes, self.state, self.responses, self.load = routes, state, responses, load
        self.serving = state.serving
        self.counted = {}   # (endpoint, status) -> its counter's child, made once

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await self.lifespan(receive, send)
        if scope["type"] != "http":   # a websocket: none is served
            if (await receive())["type"] == "websocket.connect":
                await send({"type": "websocket.close", "code": 1008})
            return
        path, method = scope["path"], scope["method"]
        for prefix in PREFIXES:
            if path.startswith(prefix):
                path = prefix
        refused = None
        if path not in ALWAYS_OPEN and (self.serving.draining or not self.serving.ready):
            why = "shutting down" if self.serving.draining else "loading its models"
            refused = HTTPError(503, f"server: {why}; try again (another replica)",
                                {"Retry-After": "1", "Connection": "close"})
        elif path in QUEUED and method == "POST":
            refused = self.queue_full()
        if refused is not None:
            status = refused.status
            await error_response(refused, path in OPENAI_PATHS)(scope, receive, send)
        else:
            self.serving.in_flight += 1
            if path in QUEUED and method == "POST":   # its place is held until it is sent (unless_disconnected)
                self.serving.entering += 1
                scope[ENTERING] = True
            try:
                status = await self.dispatch(scope, receive, send, path, method)
            finally:
                self.serving.in_flight -= 1
                if scope.pop(ENTERING, False):   # refused or failed before it was sent
                    self.serving.entering -= 1
        key = (path if path in ENDPOINTS else "other", status)
        counter = self.counted.get(key)
        if counter is None:   # the endpoints are a fixed set and statuses few: the dict stays small
            counter = self.counted[key] = self.responses.labels(key[0], str(key[1]))
        counter.inc()

    async def dispatch(self, scope, receive, send, path, method):
        """Answers the request; returns the answer's status."""
        methods = self.routes.get(path)
        openai = path in OPENAI_PATHS
        if methods is None:
            response = error_response(HTTPError(404, f"{path}: Not Found"), openai)
        elif method not in methods and not (method == "HEAD" and "GET" in methods):
            allowed = ", ".join(sorted(set(methods) | ({"HEAD"} if "GET" in methods else set())))
            response = error_response(HTTPError(405, f"{path}: Method Not Allowed", {"Allow": allowed}), openai)
        else:
            try:
                response = await methods.get(method, methods.get("GET"))(Request(scope, receive))
            except HTTPError as error:
                response = error_response(error, openai)
            except (ClientDisconnect, Disconnected):   # nobody reads this answer; it only ends the request
                response = Response(status_code=499)
            except Exception as error:  # noqa: BLE001 - a bug: still JSON, and the server keeps serving
                print(f"ctransformer-serve: internal error on {path}: {error!r}", file=sys.stderr)
                response = error_response(HTTPError(500, "server: internal error (a bug; the server's log has it)"),
                                          openai)
        await response(scope, receive, send)
        return response.status_code

    async def lifespan(self, receive, send):
        """Starts the load in the background (/ready answers 503 until it ends) and closes the engine at the end."""
        task = None
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                task = asyncio.ensure_future(self.load()) if self.load is not None else None
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if task is not None:
                    task.cancel()
                try:
                    self.state.engine.close()
                except Exception as error:  # noqa: BLE001 - the server is stopping: say why, and stop
                    await send({"type": "lifespan.shutdown.failed", "message": repr(error)})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                return

    def queue_full(self):
        """The 429 for a request that the full queue could not take, or None when there is room. The requests that
        passed this check and are not yet sent hold their places, so that none is refused after its body was read
        and parsed. (A body that comes with its headers is sent in the same turn of the loop; one that comes later
        would leave room for others to fill the queue meanwhile.)"""
        try:
            self.state.engine.check_room(self.serving.entering)
        except QueueFull as error:
            return refusal(error)
        return None


# The metrics' endpoint label takes these values only (any other path is "other"), so a scan of random paths cannot
# grow the label set without bound.
ENDPOINTS = tuple(routes_of(None))
