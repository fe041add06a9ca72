"""The HTTP side of ``ctransformer-serve``: an ASGI application over an ``AsyncEngine`` (Starlette's requests and
responses, our own routing).

``create_app(engine)`` answers:

- ``POST /translate`` (text or HTML, with the beam's alternatives), ``POST /translate_file`` (.txt, .html), ``GET
  /languages`` and ``GET /frontend/settings`` in LibreTranslate's shape, so its clients work unchanged;
- ``POST /v1/translate`` (JSON, optionally server-sent events) and ``GET /v1/models`` (OpenAI's list shape);
- ``POST /v1/completions`` and ``POST /v1/chat/completions`` in OpenAI's shape, for a GPT (its continuations,
  optionally streamed, cut at stop strings, with logprobs, logit_bias and the penalties), and a chat for a
  translator (the last user message translated);
- ``GET /health``, ``GET /ready`` and ``GET /metrics`` (Prometheus) for a load balancer and a scraper;
- ``GET /``, a one-page web UI (static/index.html).

Every refusal is a JSON ``{"error": "..."}`` whose message names the field at fault (OpenAI's
``{"error": {"message", "type", "param", "code"}}`` on its endpoints). The engine does the
translating; this module only checks, routes, streams and counts. See docs/serve.md.
"""
import asyncio
import contextlib
import email.parser
import email.policy
import hmac
import json
import math
import pathlib
import sys
import time
import types
import urllib.parse
import uuid

import anyio
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from ctransformer import precision as _precision
from ctransformer.serve import chat_template, html_text
from ctransformer.serve.engine import (MAX_LOGPROBS, Completion, EngineClosed, QueueFull, Sampling, UnknownModel,
                                       stop_strings)

__all__ = ["create_app"]

PRECISIONS = _precision.SERVING
# The sampling fields both of OpenAI's endpoints take (their meanings: AsyncEngine's Sampling).
SAMPLING_FIELDS = ("max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "logit_bias", "presence_penalty",
                   "frequency_penalty", "logprobs")
COMPLETION_FIELDS = ("prompt", "model", "precision", *SAMPLING_FIELDS, "echo", "stream", "stream_options", "n", "user",
                     "timeout_ms", "api_key")
MAX_CHOICES = 16   # n: the choices of one request (each a request in the engine's queue)
CHAT_FIELDS = ("messages", "model", "precision", *SAMPLING_FIELDS, "max_completion_tokens", "top_logprobs", "stream",
               "stream_options", "n", "user", "timeout_ms", "api_key")
# Fields OpenAI defines that this server does not honour: taken only with a value that asks for nothing (the last one
# listed is named in the refusal), refused by name otherwise.
NEUTRAL = {"best_of": (None, 1), "suffix": (None, ""), "tools": (None, []), "tool_choice": (None, "none"),
           "response_format": (None, {"type": "text"}), "parallel_tool_calls": (None, False, True),
           "store": (None, False), "metadata": (None, {}), "service_tier": (None, "auto", "default")}
# A chat's roles (developer is OpenAI's newer name for system), and how the plain template (chat_prompt) names them.
CHAT_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
ROLE_NAMES = {"system": "System", "user": "User", "assistant": "Assistant"}
# The endpoints in OpenAI's shape: their refusals are {"error": {"message", "type", "param", "code"}}.
OPENAI_PATHS = ("/v1/completions", "/v1/chat/completions", "/v1/models")
V1_FIELDS = ("texts", "model", "precision", "beam_size", "max_decoding_length", "length_penalty", "stream",
             "timeout_ms", "api_key")
# Paths that keep answering while the server loads or drains: a balancer and a scraper must see it go.
ALWAYS_OPEN = ("/health", "/ready", "/metrics")
# Paths whose requests wait in the engine's queue: refused with 429 before their body is read when it is full.
QUEUED = ("/translate", "/translate_file", "/v1/translate", "/v1/completions", "/v1/chat/completions")
ENTERING = "ctransformer.entering"   # in a queued request's scope from the queue's check until it is sent
# The metrics' endpoint label takes these values only (any other path is "other"), so a scan of random
# paths cannot grow the label set without bound.
ENDPOINTS = ("/", "/translate", "/translate_file", "/download_file/", "/languages", "/frontend/settings",
             "/v1/translate", "/v1/models", "/v1/completions", "/v1/chat/completions", "/health", "/ready", "/metrics")
# Routes that take every path under them (their rest is an argument).
PREFIXES = ("/download_file/",)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# LibreTranslate's /languages names each code; the codes of a model without an entry here show as the code.
LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek", "en": "English", "es": "Spanish",
    "fi": "Finnish", "fr": "French", "hi": "Hindi", "hu": "Hungarian", "it": "Italian", "ja": "Japanese",
    "ko": "Korean", "nl": "Dutch", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian",
    "sv": "Swedish", "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}
STATIC = pathlib.Path(__file__).resolve().parent / "static"
# /translate_file's formats (by the file name's suffix) and their media types; the translated files kept.
FILE_FORMATS = {".txt": "text/plain; charset=utf-8", ".html": "text/html; charset=utf-8",
                ".htm": "text/html; charset=utf-8"}
FILES_KEPT = 64


class HTTPError(Exception):
    """A refusal: its status and the JSON message the client gets."""

    def __init__(self, status, message, headers=None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


class _Disconnected(Exception):
    """The client went away while its request waited for the engine (nobody to answer)."""


class _Serving:
    """What the server is doing: loading, serving or draining, and how many requests are inside; of those, how many
    translations and completions have passed the queue's check and not yet been sent to the engine (each holds a
    place in the queue meanwhile)."""

    def __init__(self, ready):
        self.ready, self.draining, self.in_flight, self.load_error = ready, False, 0, None
        self.entering = 0


class _EngineCollector:
    """The engine's own counters, read at each scrape (the engine keeps them; copying them into
    prometheus_client's objects on every change would cost the decoding loop)."""

    def __init__(self, engine, serving):
        self.engine, self.serving = engine, serving

    def collect(self):
        stats = self.engine.stats()
        yield GaugeMetricFamily("ctransformer_ready", "1 when the server takes requests, 0 while loading or draining",
                                value=1.0 if self.serving.ready and not self.serving.draining else 0.0)
        yield GaugeMetricFamily("ctransformer_queue_depth", "requests waiting for rows", value=stats["queue_depth"])
        yield GaugeMetricFamily("ctransformer_rows_in_use", "decoder rows in the running batch",
                                value=stats["rows_in_use"])
        yield GaugeMetricFamily("ctransformer_lanes", "batches the running model is split into, one a thread (int8)",
                                value=stats["lanes"])
        for key, help_text in (("requests", "requests the engine accepted"),
                               ("tokens", "tokens the engine produced (tokens/s: rate of this)"),
                               ("steps", "decoder steps the engine ran"),
                               ("rejected", "requests refused because the queue was full (429)"),
                               ("cancelled", "requests whose client went away before the end"),
                               ("timed_out", "requests stopped by their timeout_ms")):
            yield CounterMetricFamily(f"ctransformer_{key}", help_text, value=stats[f"{key}_total"])
        # The engine keeps the step time as a sum and a count, which is a Prometheus summary without
        # quantiles: rate(_sum) / rate(_count) is the mean step time.
        yield SummaryMetricFamily("ctransformer_step_seconds", "time of one engine step (all rows)",
                                  count_value=stats["steps_total"], sum_value=stats["step_seconds_total"])


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
    serving = _Serving(ready=startup is None)
    registry = CollectorRegistry()
    registry.register(_EngineCollector(engine, serving))
    latency = Histogram("ctransformer_request_seconds", "end-to-end time of a translation request, by endpoint",
                        ["endpoint"], buckets=LATENCY_BUCKETS, registry=registry)
    first_token = Histogram("ctransformer_time_to_first_token_seconds",
                            "time from a streamed request's arrival to its first piece", buckets=LATENCY_BUCKETS,
                            registry=registry)
    responses = Counter("ctransformer_http_responses", "HTTP responses by endpoint and status",
                        ["endpoint", "status"], registry=registry)
    # Each endpoint's child made once (shown from the start, at zero): labels() takes a lock and a lookup per call.
    latency_of = {endpoint: latency.labels(endpoint)
                  for endpoint in ("/translate", "/v1/translate", "/v1/completions", "/v1/chat/completions")}
    page = (STATIC / "index.html").read_text(encoding="utf-8")
    translated_files = {}   # key -> (name, bytes, media type): /translate_file's, the oldest dropped first

    # --- reading and checking a request ---------------------------------------------------------------

    async def read_body(request):
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_body_bytes:
            raise HTTPError(413, f"body: {declared} bytes, more than the limit of {max_body_bytes}")
        # A timer a part, which cancels this task when it fires (a heap entry, where wait_for would make a task a
        # part: the server's Python per request is what limits it under load).
        loop, task, expired = asyncio.get_running_loop(), asyncio.current_task(), []

        def expire():
            expired.append(True)
            task.cancel()

        chunks, size = [], 0
        timer = loop.call_later(body_timeout, expire)
        try:
            async for chunk in request.stream():
                timer.cancel()
                timer = loop.call_later(body_timeout, expire)
                size += len(chunk)
                if size > max_body_bytes:
                    raise HTTPError(413, f"body: more than the limit of {max_body_bytes} bytes")
                chunks.append(chunk)
        except asyncio.CancelledError:
            if not expired:
                raise
            if hasattr(task, "uncancel"):   # Python 3.11+: the cancellation is handled here
                task.uncancel()
            raise HTTPError(408, f"body: {size} bytes came, then nothing for {body_timeout:g} s",
                            {"Connection": "close"}) from None
        finally:
            timer.cancel()
        return b"".join(chunks)

    def as_text(body):
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError as error:
            raise HTTPError(400, f"body: not UTF-8 (byte {error.start} is {body[error.start]:#04x})") from None

    def parse_json(body):
        def no_constants(name):   # NaN and Infinity are Python's extension, not JSON
            raise ValueError(f"{name} is not a JSON value")

        try:
            data = json.loads(as_text(body), parse_constant=no_constants)
        except (ValueError, RecursionError) as error:   # RecursionError: nesting deeper than the parser's stack
            raise HTTPError(400, f"body: not valid JSON ({str(error)[:200]})") from None
        if not isinstance(data, dict):
            raise HTTPError(400, f"body: expected a JSON object, got {type(data).__name__}")
        return data

    def parse_form(body, content_type, files=None):
        """LibreTranslate's form bodies: url-encoded, or multipart (its web page sends FormData). A field
        given twice (q) becomes a list. files: a dict that gets each multipart file part as name -> (filename,
        bytes); without it, file parts are read as text fields."""
        fields = {}
        if content_type.startswith("multipart/form-data"):
            try:   # the standard library's MIME parser, so the extra needs no multipart package
                message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                    b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body)
                parts = [(part.get_param("name", header="content-disposition"), part.get_filename(),
                          part.get_payload(decode=True))
                         for part in message.iter_parts()] if message.is_multipart() else None
            except Exception:   # noqa: BLE001 - any malformed body is the client's fault
                parts = None
            if parts is None:
                raise HTTPError(400, "body: not a valid multipart/form-data body")
            pairs = []
            for name, filename, payload in parts:
                if files is not None and isinstance(name, str) and filename is not None and isinstance(payload, bytes):
                    files[name] = (filename, payload)
                elif isinstance(name, str) and isinstance(payload, bytes):
                    pairs.append((name, as_text(payload)))
        else:
            try:
                pairs = urllib.parse.parse_qsl(as_text(body), keep_blank_values=True, errors="strict")
            except UnicodeDecodeError:
                raise HTTPError(400, "body: a %-escaped value is not UTF-8") from None
        for name, value in pairs:
            if name in fields:
                fields[name] = (fields[name] if isinstance(fields[name], list) else [fields[name]]) + [value]
            else:
                fields[name] = value
        return fields

    def check_key(request, data):
        if api_key is None:
            return
        given = data.get("api_key")
        header = request.headers.get("authorization", "")
        if not given and header[:7].lower() == "bearer ":
            given = header[7:].strip()
        if not given:
            raise HTTPError(401, "api_key: this server needs an API key (the api_key field or an "
                                 "'Authorization: Bearer KEY' header)", {"WWW-Authenticate": "Bearer"})
        # Constant time, so the answer's timing does not reveal how much of a guess was right.
        if not isinstance(given, str) or not hmac.compare_digest(given.encode("utf-8", "surrogatepass"),
                                                                 api_key.encode("utf-8")):
            raise HTTPError(403, "api_key: not the server's key")

    def texts_of(value, field):
        texts = [value] if isinstance(value, str) else value
        if not isinstance(texts, list):
            raise HTTPError(400, f"{field}: expected a list of strings, got {_describe(value)}")
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise HTTPError(400, f"{field}[{i}]: expected a string, got {_describe(text)}")
        if len(texts) > max_texts:
            raise HTTPError(413, f"{field}: {len(texts)} texts, more than the limit of {max_texts} per request")
        for i, text in enumerate(texts):
            if len(text) > max_text_chars:
                raise HTTPError(413, f"{field}[{i}]: {len(text)} characters, more than the limit of {max_text_chars}")
            try:   # JSON may carry a lone surrogate (\ud800), which is no text the tokenizer can take
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise HTTPError(400, f"{field}[{i}]: holds a lone UTF-16 surrogate, not text") from None
        return texts

    def options_of(data):
        def integer(name, low, high):
            value = data.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not low <= value <= high):
                raise HTTPError(400, f"{name}: expected an integer from {low} to {high}, got {_describe(value)}")
            return value

        def number(name, low, high, low_included=True):
            value = data.get(name)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or \
                    not (low <= value if low_included else low < value) or value > high:
                raise HTTPError(400, f"{name}: expected a number {'from' if low_included else 'above'} {low} "
                                     f"to {high}, got {_describe(value)}")
            return value

        model = data.get("model")
        if model is not None and not isinstance(model, str):
            raise HTTPError(400, f"model: expected a string, got {_describe(model)}")
        chosen = data.get("precision")
        if chosen is not None:
            try:
                chosen = _precision.canonical(chosen, PRECISIONS, "request")
            except ValueError:
                raise HTTPError(400, f"precision: expected one of {', '.join(PRECISIONS)}, got "
                                     f"{_describe(chosen)}") from None
        return dict(model=model, precision=chosen, beam_size=integer("beam_size", 1, max_beam_size),
                    max_decoding_length=integer("max_decoding_length", 1, 65536),
                    length_penalty=number("length_penalty", 0, 100),
                    timeout_ms=number("timeout_ms", 0, 3_600_000, low_included=False))

    def served_model(name, chosen):
        try:
            return engine.model(name, chosen)
        except UnknownModel as error:
            raise HTTPError(404, f"model: {error}") from None

    def languages_of(served):
        return getattr(served, "source_language", None), getattr(served, "target_language", None)

    # --- waiting for the engine -----------------------------------------------------------------------

    async def unless_disconnected(request, call, *args, **kwargs):
        """The result of awaiting call(*args, **kwargs), or _Disconnected once the client has gone: the engine's work
        is then cancelled, which frees the request's rows at the engine's next step. An engine's refusal, from the
        call or its awaiting, becomes its HTTPError."""
        gone = []

        async def watch():
            while (await request.receive())["type"] != "http.disconnect":
                pass
            gone.append(True)
            work.cancel()

        work = watching = answer = None
        if request.scope.pop(ENTERING, False):   # sent now: the engine's queue counts it from here
            serving.entering -= 1
        try:   # cancelling this handler (the server stopping) cancels the awaited work too
            work = asyncio.ensure_future(call(*args, **kwargs))
            call = args = kwargs = None   # not kept while the request waits: the collector would walk them
            watching = asyncio.ensure_future(watch())
            return await work
        except asyncio.CancelledError:
            if gone:
                raise _Disconnected() from None
            raise
        except Exception as error:  # noqa: BLE001 - what refusal() does not know is a bug (500)
            answer = refusal(error)
            if answer is None:
                raise
            raise answer from None
        finally:
            if watching is not None:
                watching.cancel()
            # A refusal's traceback holds this frame, whose locals hold the tasks that hold the exceptions: a
            # cycle, freed only by the garbage collector. Past saturation a refusal comes every few ms, and the
            # collector's passes over the server's many live objects then stall the event loop for tens of ms.
            work = watching = answer = None

    def refusal(error):
        """The HTTP answer an engine's refusal deserves, or None for an error that is no refusal."""
        if isinstance(error, QueueFull):
            retry = max(1, math.ceil(getattr(error, "retry_after", 1) or 1))
            return HTTPError(429, f"queue: {error}", {"Retry-After": str(retry)})
        if isinstance(error, UnknownModel):
            return HTTPError(404, f"model: {error}")
        if isinstance(error, EngineClosed):
            return HTTPError(503, f"server: shutting down ({error})")
        if isinstance(error, (TimeoutError, asyncio.TimeoutError)):
            return HTTPError(504, f"timeout_ms: the translation did not finish in time ({error})")
        if isinstance(error, ValueError):   # the engine names the option
            return HTTPError(400, str(error))
        return None

    # --- endpoints ------------------------------------------------------------------------------------

    async def translate_v1(request):
        start = time.perf_counter()
        data = parse_json(await read_body(request))
        check_key(request, data)
        unknown = sorted(set(data) - set(V1_FIELDS))
        if unknown:
            raise HTTPError(400, f"{unknown[0]}: not a field of /v1/translate (fields: {', '.join(V1_FIELDS)})")
        if "texts" not in data:
            raise HTTPError(400, "texts: required (a list of strings)")
        if isinstance(data["texts"], str):
            raise HTTPError(400, "texts: expected a list of strings, got a string (wrap it in a list)")
        texts = texts_of(data["texts"], "texts")
        options = options_of(data)
        stream = data.get("stream", False)
        if not isinstance(stream, bool):
            raise HTTPError(400, f"stream: expected true or false, got {_describe(stream)}")
        served = served_model(options["model"], options["precision"])
        if not stream:
            translations = await unless_disconnected(request, engine.translate, texts, **options)
            latency_of["/v1/translate"].observe(time.perf_counter() - start)
            return JSONResponse({"translations": translations})
        # One text per stream: the events of several would interleave or wait on each other; a client
        # streams several texts with one request each, which the engine batches anyway.
        if len(texts) != 1:
            raise HTTPError(400, f"texts: a stream takes exactly one text, got {len(texts)} "
                                 f"(send one request per text)")
        beam_size = options["beam_size"] if options["beam_size"] is not None else served.translator.beam_size
        if beam_size > 1:   # a beam's words are not final until the search ends: one event with the result
            translation = (await unless_disconnected(request, engine.translate, texts, **options))[0]
            latency_of["/v1/translate"].observe(time.perf_counter() - start)
            return _EventStream(_events([], None, translation), None)
        try:
            pieces = engine.stream(texts[0], model=options["model"], precision=options["precision"],
                                   max_decoding_length=options["max_decoding_length"], timeout_ms=options["timeout_ms"])
        except Exception as error:  # noqa: BLE001 - a stream may refuse when called or at its first piece
            answer = refusal(error)
            if answer is None:
                raise
            raise answer from None

        async def first():
            try:
                return await pieces.__anext__()
            except StopAsyncIteration:
                return None

        try:   # the first piece before the answer's headers, so a refusal still gets its status
            piece = await unless_disconnected(request, first)
        except BaseException:
            await _close(pieces)
            raise
        first_token.observe(time.perf_counter() - start)

        def done():
            latency_of["/v1/translate"].observe(time.perf_counter() - start)

        return _EventStream(_events([] if piece is None else [piece], pieces, None, done), pieces)

    async def libretranslate(request):
        start = time.perf_counter()
        body = await read_body(request)
        content_type = request.headers.get("content-type", "").lower()
        if content_type.startswith(("application/x-www-form-urlencoded", "multipart/form-data")):
            data = parse_form(body, content_type)
        else:
            data = parse_json(body)
        check_key(request, data)
        if "q" not in data:
            raise HTTPError(400, "q: required (a string or a list of strings)")
        texts = texts_of(data["q"], "q")
        for field in ("source", "target", "format"):
            if data.get(field) is not None and not isinstance(data[field], str):
                raise HTTPError(400, f"{field}: expected a string, got {_describe(data[field])}")
        fmt = data.get("format") or "text"
        if fmt not in ("text", "html"):
            raise HTTPError(400, f"format: expected 'text' or 'html', got {_describe(fmt)}")
        alternatives = data.get("alternatives")
        if isinstance(alternatives, str) and alternatives.isdigit():   # a form's fields are strings
            alternatives = int(alternatives)
        if alternatives is not None and (isinstance(alternatives, bool) or not isinstance(alternatives, int)
                                         or not 0 <= alternatives < max_beam_size):
            raise HTTPError(400, f"alternatives: expected an integer from 0 to {max_beam_size - 1}, got "
                                 f"{_describe(alternatives)}")
        if alternatives and fmt == "html":
            raise HTTPError(400, "alternatives: not with format html (a page's texts are translated apart)")
        served = pick_model(data.get("source") or "auto", data.get("target"))
        if fmt == "html":   # the text between the tags is translated, the markup kept as it came
            translations = [await translated_html(request, served, text, "q") for text in texts]
        elif alternatives:   # the beam's n best: the first is the translation, the rest its alternatives
            best = await unless_disconnected(request, engine.hypotheses, texts, alternatives + 1, model=served.name,
                                             precision=served.precision)
            translations, others = [b[0] for b in best], [b[1:] for b in best]
            latency_of["/translate"].observe(time.perf_counter() - start)
            single = isinstance(data["q"], str)
            return JSONResponse({"translatedText": translations[0] if single else translations,
                                 "alternatives": others[0] if single else others})
        else:
            translations = await unless_disconnected(request, engine.translate, texts, model=served.name,
                                                     precision=served.precision)
        latency_of["/translate"].observe(time.perf_counter() - start)
        return JSONResponse({"translatedText": translations[0] if isinstance(data["q"], str) else translations})

    async def translated_html(request, served, page, field, limit=None):
        """An HTML document with the text between its tags translated and its markup kept as it came."""
        pieces = html_text.split(page)
        words = html_text.texts(pieces)
        sent = [w for w in words if w]
        limit = max_texts if limit is None else limit
        if len(sent) > limit:
            raise HTTPError(413, f"{field}: the HTML holds {len(sent)} texts between its tags, more than the limit of "
                                 f"{limit}")
        done = iter(await unless_disconnected(request, engine.translate, sent, model=served.name,
                                              precision=served.precision))
        return html_text.join(pieces, [next(done) if w else None for w in words])

    async def translate_file(request):
        """LibreTranslate's file translation: a multipart body with `file` (.txt: each line translated, blank lines
        kept; .html/.htm: as format html), `source`, `target` (and api_key). Answers {"translatedFileUrl"}, where
        GET fetches the translated file (kept in memory, the last FILES_KEPT of them)."""
        start = time.perf_counter()
        body = await read_body(request)
        content_type = request.headers.get("content-type", "").lower()
        if not content_type.startswith("multipart/form-data"):
            raise HTTPError(400, "file: expected a multipart/form-data body with the file (as LibreTranslate takes it)")
        files = {}
        data = parse_form(body, content_type, files)
        check_key(request, data)
        if "file" not in files:
            raise HTTPError(400, "file: required (a .txt or .html file part)")
        filename, payload = files["file"]
        name = pathlib.PurePosixPath(filename.replace("\\", "/")).name or "file"
        suffix = pathlib.PurePosixPath(name).suffix.lower()
        if suffix not in FILE_FORMATS:
            raise HTTPError(400, f"file: expected one of {', '.join(FILE_FORMATS)}, got {_describe(name)}")
        text = as_text(payload)
        for field in ("source", "target"):
            if data.get(field) is not None and not isinstance(data[field], str):
                raise HTTPError(400, f"{field}: expected a string, got {_describe(data[field])}")
        served = pick_model(data.get("source") or "auto", data.get("target"))
        if suffix == ".txt":   # line by line, each line's ending kept
            lines = text.splitlines(keepends=True)
            bodies = [line.rstrip("\r\n") for line in lines]
            sent = [b for b in bodies if b.strip()]
            if any(len(b) > max_text_chars for b in sent):
                raise HTTPError(413, f"file: a line holds more than the limit of {max_text_chars} characters")
            done = []
            for i in range(0, len(sent), max_texts):   # the engine's limit of one request, a batch at a time
                done += await unless_disconnected(request, engine.translate, sent[i:i + max_texts], model=served.name,
                                                  precision=served.precision)
            done = iter(done)
            out = "".join((next(done) if b.strip() else b) + line[len(b):] for b, line in zip(bodies, lines))
        else:
            out = await translated_html(request, served, text, "file", limit=max_texts * 16)
        key = uuid.uuid4().hex
        translated_files[key] = (name, out.encode("utf-8"), FILE_FORMATS[suffix])
        while len(translated_files) > FILES_KEPT:
            translated_files.pop(next(iter(translated_files)))
        latency_of["/translate"].observe(time.perf_counter() - start)
        base = str(request.base_url).rstrip("/")
        return JSONResponse({"translatedFileUrl": f"{base}/download_file/{key}/{urllib.parse.quote(name)}"})

    async def download_file(request):
        _, _, key, *_ = request.url.path.split("/") + [""]
        found = translated_files.get(key)
        if found is None:
            raise HTTPError(404, "file: not found (translated files are kept for a while only)")
        name, content, media_type = found
        return Response(content, media_type=media_type, headers={
            "Content-Disposition": f"attachment; filename*=UTF-8''{urllib.parse.quote(name)}"})

    def pick_model(source, target):
        """The model that translates source to target, when models declare their languages (as LibreTranslate
        routes: a pair nobody serves is a 400); else the first. source "auto" is taken when one source language is
        served (nothing is detected)."""
        models = [m for m in engine.models if m.kind == "translator"]
        declared = [m for m in models if languages_of(m)[1] is not None]
        if not declared:
            if not models:
                raise HTTPError(503, "server: no model is loaded")
            return models[0]
        if not target:
            raise HTTPError(400, "target: required (a language code; GET /languages lists them)")
        if source == "auto":
            sources = sorted({languages_of(m)[0] for m in declared})
            if len(sources) > 1:
                raise HTTPError(400, f"source: 'auto' needs one source language served, and this server translates "
                                     f"from {', '.join(sources)}: name it (languages are not detected)")
            source = sources[0]
        for m in declared:
            if languages_of(m) == (source, target):
                return m
        raise HTTPError(400, f"source, target: no loaded model translates {source!r} to {target!r} "
                             f"(GET /languages lists the pairs)")

    async def list_languages(request):
        pairs = {}
        for m in engine.models:
            src, tgt = languages_of(m) if m.kind == "translator" else (None, None)
            if src is not None and tgt is not None:
                pairs.setdefault(src, set()).add(tgt)
        return JSONResponse([{"code": src, "name": LANGUAGE_NAMES.get(src, src), "targets": sorted(pairs[src])}
                             for src in sorted(pairs)])

    async def frontend_settings(request):
        """LibreTranslate's settings for its web front end: the limits, whether a key is needed, and the languages
        its menus start at (auto, when several sources are served)."""
        pairs = sorted({languages_of(m) for m in engine.models if m.kind == "translator"} - {(None, None)})
        sources = sorted({src for src, _ in pairs})
        source = sources[0] if len(sources) == 1 else "auto"
        target = pairs[0][1] if pairs else "en"
        named = lambda code: {"code": code, "name": "Auto Detect" if code == "auto" else  # noqa: E731
                              LANGUAGE_NAMES.get(code, code)}
        return JSONResponse({"charLimit": max_text_chars, "frontendTimeout": 500, "apiKeys": api_key is not None,
                             "keyRequired": api_key is not None, "suggestions": False, "filesTranslation": True,
                             "supportedFilesFormat": list(FILE_FORMATS), "language": {"source": named(source),
                                                                      "target": named(target)}})

    async def list_models(request):
        data = []
        for m in engine.models:
            entry = {"id": m.name, "object": "model", "owned_by": "ctransformer", "kind": m.kind,
                     "precision": m.precision}
            if m.kind == "translator":
                src, tgt = languages_of(m)
                entry.update(source_language=src, target_language=tgt, beam_size=m.translator.beam_size)
            else:
                entry.update(max_seq_len=m.max_seq_len)
            data.append(entry)
        return JSONResponse({"object": "list", "data": data})

    async def completions(request):
        """OpenAI's legacy completions for a GPT: prompt (a string, or a list of them), max_tokens (16),
        temperature (1), top_p (1), top_k (ours), seed, stop, stream (with stream_options.include_usage); answers
        its text_completion shape."""
        start = time.perf_counter()
        data = parse_json(await read_body(request))
        check_key(request, data)
        check_fields(data, COMPLETION_FIELDS, "/v1/completions")
        if "prompt" not in data:
            raise HTTPError(400, "prompt: required (a string or a list of strings)")
        prompts = texts_of(data["prompt"], "prompt")
        if any(not p for p in prompts):
            raise HTTPError(400, "prompt: a prompt is empty (it needs one character at least)")
        options = options_of({k: v for k, v in data.items() if k in ("model", "precision", "timeout_ms")})
        try:
            served = engine.model(options["model"], options["precision"], kind="generator")
        except UnknownModel as error:
            raise HTTPError(404, f"model: {error}") from None
        return await generated(request, data, start, served, options, prompts, "/v1/completions")

    async def chat_completions(request):
        """OpenAI's chat completions. A GPT continues the conversation made a prompt (chat_prompt); a translator
        translates the last user message, so any chat client can use a translator."""
        start = time.perf_counter()
        data = parse_json(await read_body(request))
        check_key(request, data)
        check_fields(data, CHAT_FIELDS, "/v1/chat/completions")
        messages = messages_of(data.get("messages"))
        options = options_of({k: v for k, v in data.items() if k in ("model", "precision", "timeout_ms")})
        try:
            served = engine.model(options["model"], options["precision"], kind="generator")
        except UnknownModel:
            try:
                served = engine.model(options["model"], options["precision"], kind="translator")
            except UnknownModel as error:
                raise HTTPError(404, f"model: {error}") from None
        if served.kind == "generator":
            template = getattr(served.tokenizer, "chat_template", None)
            if template is None:
                prompt = chat_prompt(messages)
            else:   # the model's own (tokenizer_config.json), as transformers' apply_chat_template renders it
                try:
                    prompt = chat_template.render(template, [{"role": r, "content": t} for r, t in messages],
                                                  served.tokenizer.bos_token, served.tokenizer.eos_token)
                except chat_template.TemplateRefusal as error:
                    raise HTTPError(400, f"messages: {error}") from None
            return await generated(request, data, start, served, options, [prompt], "/v1/chat/completions")
        return await translated_chat(request, data, start, served, messages)

    def check_fields(data, fields, endpoint):
        """Every field is one this endpoint takes; a field OpenAI defines that this server cannot honour is refused
        by name unless it asks for nothing (logprobs false, a penalty of 0), never ignored."""
        for name in sorted(data):
            if name in fields:
                continue
            if name in NEUTRAL and data[name] in NEUTRAL[name]:
                continue
            if name in NEUTRAL:
                raise HTTPError(400, f"{name}: not supported by this server (only {_describe(NEUTRAL[name][-1])}), "
                                     f"got {_describe(data[name])}")
            raise HTTPError(400, f"{name}: not a field this server's {endpoint} takes (fields: {', '.join(fields)})")
        n = data.get("n")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CHOICES):
            raise HTTPError(400, f"n: expected an integer from 1 to {MAX_CHOICES}, got {_describe(n)}")
        user = data.get("user")
        if user is not None and not isinstance(user, str):
            raise HTTPError(400, f"user: expected a string, got {_describe(user)}")

    def messages_of(messages):
        """[(role, text)] of a chat request's messages: system (developer), user and assistant ones, whose content
        is a string or a list of text parts."""
        if not isinstance(messages, list) or not messages:
            raise HTTPError(400, f"messages: expected a non-empty list of messages, got {_describe(messages)}")
        out = []
        for i, message in enumerate(messages):
            if not isinstance(message, dict):
                raise HTTPError(400, f"messages[{i}]: expected an object, got {_describe(message)}")
            role, content = message.get("role"), message.get("content")
            if role not in CHAT_ROLES:
                raise HTTPError(400, f"messages[{i}].role: expected one of {', '.join(CHAT_ROLES)}, got "
                                     f"{_describe(role)}")
            if isinstance(content, list):
                if not all(isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
                           for part in content):
                    raise HTTPError(400, f"messages[{i}].content: only text parts are read "
                                         '([{"type": "text", "text": ...}])')
                content = "".join(part["text"] for part in content)
            if not isinstance(content, str):
                raise HTTPError(400, f"messages[{i}].content: expected a string, got {_describe(content)}")
            texts_of([content], f"messages[{i}].content")   # the limits of one text
            out.append((CHAT_ROLES[role], content))
        return out

    def stop_of(data):
        try:
            return stop_strings(data.get("stop"))
        except ValueError as error:
            raise HTTPError(400, f"stop: expected a non-empty string or a list of 1 to 4, got "
                                 f"{_describe(data.get('stop'))}") from error

    def include_usage(data):
        stream_options = data.get("stream_options")
        if stream_options is None:
            return False
        if not isinstance(stream_options, dict) or set(stream_options) - {"include_usage"} or \
                not isinstance(stream_options.get("include_usage", False), bool):
            raise HTTPError(400, f"stream_options: expected {{\"include_usage\": true or false}}, got "
                                 f"{_describe(stream_options)}")
        if not data.get("stream"):
            raise HTTPError(400, "stream_options: only with stream true")
        return stream_options.get("include_usage", False)

    async def generated(request, data, start, served, options, prompts, endpoint):
        """A GPT's answer to a completion or a chat: each prompt continued (or streamed, one prompt), in the
        endpoint's shape."""
        chat = endpoint == "/v1/chat/completions"
        if chat:   # max_completion_tokens is chat's newer name; without either, up to the server's limit
            given = data.get("max_completion_tokens")
            if given is not None and data.get("max_tokens") not in (None, given):
                raise HTTPError(400, "max_completion_tokens: differs from max_tokens (give one of them)")
            if given is None:
                given = data.get("max_tokens") if data.get("max_tokens") is not None else max_new_tokens
            data = {**data, "max_tokens": given}
        sampling = sampling_of(data)
        stops = stop_of(data)
        usage_chunk = include_usage(data)
        stream = False if data.get("stream") is None else data["stream"]   # null: the default
        if not isinstance(stream, bool):
            raise HTTPError(400, f"stream: expected true or false, got {_describe(stream)}")
        call = dict(model=served.name, precision=served.precision, timeout_ms=options["timeout_ms"], stop=stops or None,
                    **sampling)
        shape = _ChatShape(served.name) if chat else _CompletionShape(served.name)
        n = data.get("n") or 1
        echo = data.get("echo")   # the legacy completions' echo: the prompt, then its continuation
        if echo is not None and not isinstance(echo, bool):
            raise HTTPError(400, f"echo: expected true or false, got {_describe(echo)}")
        outside = [token for token in sampling["logit_bias"] if token >= served.vocab_size]
        if outside:
            raise HTTPError(400, f"logit_bias: token id {outside[0]} is outside the vocabulary [0, {served.vocab_size})")
        if echo and sampling["logprobs"] is not None:
            raise HTTPError(400, "echo: not with logprobs (the prompt's log-probabilities are not computed)")
        if not stream:
            # n choices a prompt, prompt by prompt; choice i of a request with a seed samples from seed + i
            seeds = [None if sampling["seed"] is None else _seed_plus(sampling["seed"], i) for i in range(n)]
            try:
                done = await unless_disconnected(request, lambda: asyncio.gather(
                    *(engine.complete(p, **{**call, "seed": seed}) for p in prompts for seed in seeds)))
            except ValueError as error:   # the tokenizer's or an option's refusal, named
                raise HTTPError(400, f"{'messages' if chat else 'prompt'}: {error}") from None
            if echo:
                done = [d._replace(text=p + d.text) for p, d in zip((p for p in prompts for _ in seeds), done)]
            latency_of[endpoint].observe(time.perf_counter() - start)
            answer = shape.whole(done)
            answer["usage"]["prompt_tokens"] = sum(d.prompt_tokens for d in done[::n])   # a prompt counts once
            answer["usage"]["total_tokens"] = answer["usage"]["prompt_tokens"] + answer["usage"]["completion_tokens"]
            return JSONResponse(answer)
        if len(prompts) != 1:
            raise HTTPError(400, f"prompt: a stream takes exactly one prompt, got {len(prompts)}")
        if n != 1:
            raise HTTPError(400, f"n: a stream makes one choice, got {n}")
        counts = {}   # the prompt's and the completion's tokens, at the end
        try:
            pieces = engine.stream_completion(prompts[0], counts=counts, **call)

            async def first_piece():
                return await pieces.__anext__()

            first = await unless_disconnected(request, first_piece)
        except ValueError as error:
            await _close(locals().get("pieces"))
            raise HTTPError(400, f"{'messages' if chat else 'prompt'}: {error}") from None
        except BaseException:
            await _close(locals().get("pieces"))
            raise
        first_token.observe(time.perf_counter() - start)

        async def events():
            begin = shape.begin()
            if begin is not None:
                yield begin
            if echo:
                yield shape.piece(prompts[0])
            piece = first
            while True:
                if piece.text:
                    yield shape.piece(piece.text, piece.tokens)
                if piece.finish_reason is not None:
                    break
                piece = await pieces.__anext__()
            yield shape.end(piece.finish_reason)
            if usage_chunk:
                yield shape.usage([Completion("", "", counts["prompt_tokens"], counts["completion_tokens"])])
            latency_of[endpoint].observe(time.perf_counter() - start)
            yield "[DONE]"

        return _EventStream(events(), pieces)

    async def translated_chat(request, data, start, served, messages):
        """A translator in a chat: the last user message translated, with the model's own options."""
        unsupported = [name for name in (*SAMPLING_FIELDS, "max_completion_tokens", "top_logprobs")
                       if data.get(name) not in (None, False)] + (["n"] if data.get("n") not in (None, 1) else [])
        if unsupported:
            raise HTTPError(400, f"{unsupported[0]}: a translator ({served.name}) takes no sampling options; it "
                                 "translates the last user message")
        users = [text for role, text in messages if role == "user"]
        if not users:
            raise HTTPError(400, "messages: a translator translates the last user message, and there is none")
        stream = False if data.get("stream") is None else data["stream"]   # null: the default
        if not isinstance(stream, bool):
            raise HTTPError(400, f"stream: expected true or false, got {_describe(stream)}")
        usage_chunk = include_usage(data)
        (translation,) = await unless_disconnected(request, engine.translate, [users[-1]], model=served.name,
                                                   precision=served.precision)
        latency_of["/v1/chat/completions"].observe(time.perf_counter() - start)
        shape = _ChatShape(served.name)
        if not stream:
            return JSONResponse(shape.whole([_Translated(translation)]))

        async def events():
            yield shape.begin()
            if translation:
                yield shape.piece(translation)
            yield shape.end("stop")
            if usage_chunk:
                yield shape.usage([_Translated(translation)])
            yield "[DONE]"

        return _EventStream(events(), None)

    def sampling_of(data):
        def number(name, low, high, default):
            value = data.get(name, default)
            if value is None:
                return default
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or \
                    not low <= value <= high:
                raise HTTPError(400, f"{name}: expected a number from {low} to {high}, got {_describe(value)}")
            return value

        max_tokens = data.get("max_tokens")
        max_tokens = 16 if max_tokens is None else max_tokens
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= max_new_tokens:
            raise HTTPError(400, f"max_tokens: expected an integer from 1 to {max_new_tokens}, got "
                                 f"{_describe(max_tokens)}")
        top_k = data.get("top_k")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0):
            raise HTTPError(400, f"top_k: expected an integer >= 0 (0: every id), got {_describe(top_k)}")
        seed = data.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not -2**63 <= seed < 2**63):
            raise HTTPError(400, f"seed: expected an integer in [-2**63, 2**63), got {_describe(seed)}")
        top_p = number("top_p", 0, 1, 1.0)
        if top_p == 0:
            raise HTTPError(400, "top_p: expected a number above 0 to 1, got 0")
        bias = data.get("logit_bias")
        try:   # the engine's own check, its message prefixed by the field
            bias = Sampling(logit_bias=bias).logit_bias
        except ValueError as error:
            raise HTTPError(400, f"logit_bias: {str(error).partition(': ')[2] or error}") from None
        return dict(max_tokens=max_tokens, temperature=number("temperature", 0, 2, 1.0), top_k=top_k, top_p=top_p,
                    seed=seed, logit_bias=bias, presence_penalty=number("presence_penalty", -2, 2, 0.0),
                    frequency_penalty=number("frequency_penalty", -2, 2, 0.0), logprobs=logprobs_of(data))

    def logprobs_of(data):
        """The alternatives a token's logprobs list, or None for no logprobs: completions' logprobs (an integer),
        or chat's logprobs (true or false) with top_logprobs."""
        given, top = data.get("logprobs"), data.get("top_logprobs")
        if "messages" not in data:   # the legacy completions: logprobs is the count itself
            if given is not None and (isinstance(given, bool) or not isinstance(given, int)
                                      or not 0 <= given <= MAX_LOGPROBS):
                raise HTTPError(400, f"logprobs: expected an integer from 0 to {MAX_LOGPROBS}, got {_describe(given)}")
            return given
        if given is not None and not isinstance(given, bool):
            raise HTTPError(400, f"logprobs: expected true or false, got {_describe(given)}")
        if top is not None and (isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_LOGPROBS):
            raise HTTPError(400, f"top_logprobs: expected an integer from 0 to {MAX_LOGPROBS}, got {_describe(top)}")
        if top is not None and not given:
            raise HTTPError(400, "top_logprobs: only with logprobs true")
        return (top or 0) if given else None

    async def health(request):
        return JSONResponse({"status": "ok"})

    async def ready(request):
        if serving.draining:
            return JSONResponse({"status": "draining"}, status_code=503)
        if not serving.ready:
            status = "failed: " + str(serving.load_error) if serving.load_error else "loading"
            return JSONResponse({"status": status}, status_code=503)
        return JSONResponse({"status": "ready"})

    async def metrics(request):
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    async def index(request):
        return HTMLResponse(page)

    # --- the application --------------------------------------------------------------------------------

    async def load():   # the command line's startup, in the background; /ready says how it went
        try:
            await startup()
            serving.ready = True
        except Exception as error:  # noqa: BLE001 - reported by /ready and the command line
            serving.load_error = error

    async def drain(timeout=None):
        """Stop taking requests (503, /ready too) and wait up to `timeout` seconds (the app's shutdown_timeout
        by default) for every accepted one to be answered. True when all were."""
        timeout = shutdown_timeout if timeout is None else timeout
        serving.draining = True
        deadline = time.monotonic() + timeout
        engine.start_draining()
        finished = await engine.drain(timeout)
        while serving.in_flight and time.monotonic() < deadline:   # the answers are still being written
            await asyncio.sleep(0.01)
        return bool(finished) and not serving.in_flight

    routes = {
        "/": {"GET": index},
        "/translate": {"POST": libretranslate},
        "/translate_file": {"POST": translate_file},
        "/download_file/": {"GET": download_file},   # a prefix: /download_file/KEY/NAME
        "/languages": {"GET": list_languages},
        "/frontend/settings": {"GET": frontend_settings},
        "/v1/translate": {"POST": translate_v1},
        "/v1/models": {"GET": list_models},
        "/v1/completions": {"GET": completions, "POST": completions},
        "/v1/chat/completions": {"POST": chat_completions},
        "/health": {"GET": health},
        "/ready": {"GET": ready},
        "/metrics": {"GET": metrics},
    }
    state = types.SimpleNamespace(engine=engine, serving=serving, registry=registry, drain=drain)
    return _App(routes, state, responses, refusal, load if startup is not None else None)


class _App:
    """The ASGI application. Each request goes by its exact path and method to its endpoint, whose refusals
    (HTTPError) become JSON answers. Before that, it refuses requests while loading or draining, and a
    translation or completion with 429 before its body is read when the queue is full; it counts the requests
    inside (the drain waits for them) and every response by endpoint and status.

    The routing is ours, not a framework's: the paths are fixed, and Starlette's router and middleware layers
    took a fifth of the server's Python per request, which is what limits the server when outputs are short.
    Starlette's Request and Response classes are still used."""

    def __init__(self, routes, state, responses, refusal, load):
        self.routes, self.state, self.responses, self.refusal, self.load = routes, state, responses, refusal, load
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
            await _error(refused, path)(scope, receive, send)
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
        if methods is None:
            response = _error(HTTPError(404, f"{path}: Not Found"), path)
        elif method not in methods and not (method == "HEAD" and "GET" in methods):
            allowed = ", ".join(sorted(set(methods) | ({"HEAD"} if "GET" in methods else set())))
            response = _error(HTTPError(405, f"{path}: Method Not Allowed", {"Allow": allowed}), path)
        else:
            try:
                response = await methods.get(method, methods.get("GET"))(Request(scope, receive))
            except HTTPError as error:
                response = _error(error, path)
            except (ClientDisconnect, _Disconnected):   # nobody reads this answer; it only ends the request
                response = Response(status_code=499)
            except Exception as error:  # noqa: BLE001 - a bug: still JSON, and the server keeps serving
                print(f"ctransformer-serve: internal error on {path}: {error!r}", file=sys.stderr)
                response = _error(HTTPError(500, "server: internal error (a bug; the server's log has it)"), path)
        await response(scope, receive, send)
        return response.status_code

    async def lifespan(self, receive, send):
        """Starts the load in the background (/ready answers 503 until it ends) and closes the engine at the
        end."""
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
        and parsed. (A body that comes with its headers is sent in the same turn of the loop; one that comes later,
        or a task between the check and the engine, as there was before translate() returned a Future, left room
        for others to fill the queue meanwhile: one refusal in seven at twice saturation.)"""
        try:
            self.state.engine.check_room(self.serving.entering)
        except QueueFull as error:
            return self.refusal(error)
        return None


def _error(error, path=None):
    """The JSON answer of a refusal: {"error": message} (LibreTranslate's shape and ours), or on OpenAI's endpoints
    OpenAI's {"error": {"message", "type", "param", "code"}}, which its SDKs read. The message starts with the field
    at fault, which is the param when it is one of the request's."""
    if path not in OPENAI_PATHS:
        return JSONResponse({"error": error.message}, status_code=error.status, headers=error.headers)
    field = error.message.partition(":")[0]
    param = None if field in ("body", "queue", "server", "api_key") or field.startswith("/") or " " in field else field
    kind = ("authentication_error" if error.status in (401, 403) else "rate_limit_error" if error.status == 429
            else "server_error" if error.status >= 500 else "invalid_request_error")
    code = {401: "invalid_api_key", 403: "invalid_api_key", 429: "rate_limit_exceeded", 504: "timeout"}.get(
        error.status, "model_not_found" if error.status == 404 and field == "model" else None)
    return JSONResponse({"error": {"message": error.message, "type": kind, "param": param, "code": code}},
                        status_code=error.status, headers=error.headers)


def _seed_plus(seed, i):
    """seed + i, wrapped into [-2**63, 2**63) as a seed must be."""
    return (seed + i + 2**63) % 2**64 - 2**63


def chat_prompt(messages):
    """A GPT's prompt of a chat that has no template of its own: each message a line "Role: text" (System, User,
    Assistant), then "Assistant:", which the model continues. [(role, text)] as messages_of gives them (roles
    system, user, assistant)."""
    return "".join(f"{ROLE_NAMES[role]}: {text}\n" for role, text in messages) + "Assistant:"


class _Translated:
    """A translator's chat answer, in a completion's terms (its token counts are not known)."""
    __slots__ = ("text",)
    finish_reason, prompt_tokens, tokens = "stop", None, None

    def __init__(self, text):
        self.text = text


def _usage(done):
    """OpenAI's usage of finished choices, or None where the counts are not known (a translator's)."""
    if any(d.prompt_tokens is None for d in done):
        return None
    usage = {"prompt_tokens": sum(d.prompt_tokens for d in done),
             "completion_tokens": sum(d.completion_tokens for d in done)}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return usage


class _CompletionShape:
    """OpenAI's text_completion answer, whole or as chunks. Its logprobs: tokens, token_logprobs, top_logprobs (a
    {text: logprob} a token) and text_offset (where each token's text starts in the choice's text)."""

    def __init__(self, model):
        self.model, self.id, self.created = model, f"cmpl-{uuid.uuid4().hex}", int(time.time())

    def _answer(self, choices, **extra):
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": self.model,
                "choices": choices, **extra}

    @staticmethod
    def _choice(text, index, finish_reason, tokens=None):
        logprobs = None if tokens is None else {
            "tokens": [t.text for t in tokens], "token_logprobs": [t.logprob for t in tokens],
            "top_logprobs": [dict(t.top) for t in tokens], "text_offset": [t.offset for t in tokens]}
        return {"text": text, "index": index, "logprobs": logprobs, "finish_reason": finish_reason}

    def whole(self, done):
        return self._answer([self._choice(d.text, i, d.finish_reason, d.tokens) for i, d in enumerate(done)],
                            usage=_usage(done))

    def begin(self):
        return None

    def piece(self, text, tokens=None):
        return self._answer([self._choice(text, 0, None, tokens)])

    def end(self, reason):
        return self._answer([self._choice("", 0, reason)])

    def usage(self, done):
        return self._answer([], usage=_usage(done))


def _chat_logprobs(tokens):
    """A chat choice's logprobs: {"content": [{token, logprob, bytes, top_logprobs}]} (None when not asked for)."""
    if tokens is None:
        return None

    def entry(text, logprob):
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    return {"content": [{**entry(t.text, t.logprob), "top_logprobs": [entry(*alt) for alt in t.top]} for t in tokens],
            "refusal": None}


class _ChatShape:
    """OpenAI's chat.completion answer, or its chat.completion.chunk stream: the role first, then content deltas,
    then the finish reason in an empty delta."""

    def __init__(self, model):
        self.model, self.id, self.created = model, f"chatcmpl-{uuid.uuid4().hex}", int(time.time())

    def _chunk(self, choices, **extra):
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": choices, **extra}

    @staticmethod
    def _delta(delta, finish_reason=None, tokens=None):
        return {"index": 0, "delta": delta, "logprobs": _chat_logprobs(tokens), "finish_reason": finish_reason}

    def whole(self, done):
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": i, "message": {"role": "assistant", "content": d.text},
                             "logprobs": _chat_logprobs(d.tokens), "finish_reason": d.finish_reason}
                            for i, d in enumerate(done)],
                "usage": _usage(done)}

    def begin(self):
        return self._chunk([self._delta({"role": "assistant", "content": ""})])

    def piece(self, text, tokens=None):
        return self._chunk([self._delta({"content": text}, None, tokens)])

    def end(self, reason):
        return self._chunk([self._delta({}, reason)])

    def usage(self, done):
        return self._chunk([], usage=_usage(done))


class _EventStream:
    """A server-sent-events answer that watches for the client going away: then it stops and closes the
    engine's iterator at once (uvicorn drops writes to a closed connection silently, so writing alone would
    not notice)."""

    status_code = 200

    def __init__(self, events, pieces):
        self.events, self.pieces = events, pieces

    async def __call__(self, scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no")]})
        async with anyio.create_task_group() as group:
            async def watch():
                while (await receive())["type"] != "http.disconnect":
                    pass
                group.cancel_scope.cancel()

            group.start_soon(watch)
            try:
                async for event in self.events:
                    # A str is sent as it is (OpenAI's closing "[DONE]"); the rest as JSON.
                    data = event if isinstance(event, str) else json.dumps(event, ensure_ascii=False)
                    await send({"type": "http.response.body", "body": f"data: {data}\n\n".encode(), "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            finally:
                with anyio.CancelScope(shield=True):   # cancelled or not, the rows go back now
                    await _close(self.events)
                    await _close(self.pieces)
            group.cancel_scope.cancel()


async def _events(pieces_so_far, pieces, translation, done=None):
    """The stream's events: a {"text"} per piece, then {"done", "translation"}; a failure after the first piece
    becomes an {"error", "status"} event (the status line has gone)."""
    parts = list(pieces_so_far)
    for piece in parts:
        yield {"text": piece}
    if pieces is not None:
        try:
            async for piece in pieces:
                parts.append(piece)
                yield {"text": piece}
        except EngineClosed as error:
            yield {"error": f"server: shutting down ({error})", "status": 503}
            return
        except (TimeoutError, asyncio.TimeoutError) as error:
            yield {"error": f"timeout_ms: the translation did not finish in time ({error})", "status": 504}
            return
        except Exception as error:  # noqa: BLE001 - a bug; the status line has gone, so say it in the stream
            print(f"ctransformer-serve: internal error in a stream: {error!r}", file=sys.stderr)
            yield {"error": "server: internal error (a bug; the server's log has it)", "status": 500}
            return
        translation = "".join(parts)
    if done is not None:
        done()
    yield {"done": True, "translation": translation}


async def _close(iterator):
    if iterator is not None and hasattr(iterator, "aclose"):
        with contextlib.suppress(Exception):
            await iterator.aclose()


def _describe(value):
    """A short description of a bad value for an error message (never the whole of a huge one)."""
    text = json.dumps(value, ensure_ascii=True) if isinstance(value, (str, int, float, bool, type(None))) \
        else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."
