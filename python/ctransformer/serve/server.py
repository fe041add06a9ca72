"""What every endpoint of ``ctransformer-serve`` reads: ``Server``, holding the engine, the server's state (loading,
serving, draining), its limits and its metrics, and waiting for the engine on a request's behalf."""
import asyncio
import dataclasses
import hmac
import math
from typing import Optional

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily

from ctransformer.serve.engine import EngineClosed, QueueFull, UnknownModel
from ctransformer.serve.http_io import Disconnected, HTTPError

ENTERING = "ctransformer.entering"   # in a queued request's scope from the queue's check until it is sent
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# The endpoints whose requests the engine answers: each has a latency child, made once.
TIMED = ("/translate", "/v1/translate", "/v1/completions", "/v1/chat/completions")


@dataclasses.dataclass(frozen=True)
class Limits:
    """The limits of one request (docs/serve.md, "Limits and errors")."""
    api_key: Optional[str] = None   # when given, requests must carry it (the api_key field or Authorization: Bearer)
    max_texts: int = 64             # texts a request (413 beyond)
    max_text_chars: int = 5000      # characters a text (413 beyond)
    max_body_bytes: int = 1 << 20   # bytes a body (413 beyond)
    body_timeout: float = 60.0      # seconds between two parts of a body (408 beyond)
    max_beam_size: int = 16         # the largest beam_size a request may ask for
    max_new_tokens: int = 1024      # the largest max_tokens a completion may ask for
    shutdown_timeout: float = 30.0  # how long drain() waits for accepted requests by default


class Serving:
    """What the server is doing: loading, serving or draining, and how many requests are inside; of those, how many
    translations and completions have passed the queue's check and not yet been sent to the engine (each holds a
    place in the queue meanwhile)."""

    def __init__(self, ready):
        self.ready, self.draining, self.in_flight, self.load_error = ready, False, 0, None
        self.entering = 0


class _EngineCollector:
    """The engine's own counters, read at each scrape (the engine keeps them; copying them into prometheus_client's
    objects on every change would cost the decoding loop)."""

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
        # The engine keeps the step time as a sum and a count, which is a Prometheus summary without quantiles:
        # rate(_sum) / rate(_count) is the mean step time.
        yield SummaryMetricFamily("ctransformer_step_seconds", "time of one engine step (all rows)",
                                  count_value=stats["steps_total"], sum_value=stats["step_seconds_total"])


class Metrics:
    """The server's Prometheus registry: the engine's counters (read at each scrape), each endpoint's latency, the
    time to a stream's first piece, and the responses by endpoint and status."""

    def __init__(self, engine, serving):
        self.registry = CollectorRegistry()
        self.registry.register(_EngineCollector(engine, serving))
        latency = Histogram("ctransformer_request_seconds", "end-to-end time of a translation request, by endpoint",
                            ["endpoint"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.first_token = Histogram("ctransformer_time_to_first_token_seconds",
                                     "time from a streamed request's arrival to its first piece",
                                     buckets=LATENCY_BUCKETS, registry=self.registry)
        self.responses = Counter("ctransformer_http_responses", "HTTP responses by endpoint and status",
                                 ["endpoint", "status"], registry=self.registry)
        # Each endpoint's child made once (shown from the start, at zero): labels() takes a lock and a lookup a call.
        self.latency = {endpoint: latency.labels(endpoint) for endpoint in TIMED}


class Server:
    """The engine, the server's state, its limits and metrics, and the files /translate_file made: what the
    endpoints (plain functions of the server and the request) read."""

    def __init__(self, engine, limits, ready):
        self.engine, self.limits = engine, limits
        self.serving = Serving(ready)
        self.metrics = Metrics(engine, self.serving)
        self.translated_files = {}   # key -> (name, bytes, media type): /translate_file's, the oldest dropped first

    def check_key(self, request, given):
        """401 / 403 unless the request carries the server's key (`given`: its api_key field), when it has one."""
        api_key = self.limits.api_key
        if api_key is None:
            return
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

    def model(self, name, precision, kind="translator"):
        """The served model, or 404 naming the model."""
        try:
            return self.engine.model(name, precision, kind=kind)
        except UnknownModel as error:
            raise HTTPError(404, f"model: {error}") from None

    def observe(self, endpoint, start, now):
        self.metrics.latency[endpoint].observe(now - start)

    async def unless_disconnected(self, request, call, *args, **kwargs):
        """The result of awaiting call(*args, **kwargs), or Disconnected once the client has gone: the engine's work
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
            self.serving.entering -= 1
        try:   # cancelling this handler (the server stopping) cancels the awaited work too
            work = asyncio.ensure_future(call(*args, **kwargs))
            call = args = kwargs = None   # not kept while the request waits: the collector would walk them
            watching = asyncio.ensure_future(watch())
            return await work
        except asyncio.CancelledError:
            if gone:
                raise Disconnected() from None
            raise
        except Exception as error:  # noqa: BLE001 - what refusal() does not know is a bug (500)
            answer = refusal(error)
            if answer is None:
                raise
            raise answer from None
        finally:
            if watching is not None:
                watching.cancel()
            # A refusal's traceback holds this frame, whose locals hold the tasks that hold the exceptions: a cycle,
            # freed only by the garbage collector. Past saturation refusals come fast, and the collector's passes over
            # the server's many live objects then stall the event loop.
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


def languages_of(served):
    """A served model's (source, target) languages, (None, None) when it declares none."""
    return getattr(served, "source_language", None), getattr(served, "target_language", None)
