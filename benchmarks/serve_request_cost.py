"""The server's own Python per request: each endpoint's requests sent straight to the ASGI application (no socket,
no HTTP parser) over an engine that answers at once, so what is timed is the app: reading the body, parsing and
checking the request, routing, the metrics and the answer's JSON.

    .venv/bin/python benchmarks/serve_request_cost.py [--requests 3000]

Prints microseconds a request for each endpoint (the median of --rounds rounds). To compare two versions of the server's
Python, pair two runs with farm-bench, each over its own copy of the package (PYTHONPATH): the engine here is a
stand-in, so any version's app runs over it."""
import argparse
import asyncio
import gc
import json
import statistics
import time

from ctransformer.serve import create_app
from ctransformer.serve import engine as engine_module

BODIES = {
    "/translate": {"q": "Ein Mann fährt Fahrrad.", "source": "de", "target": "en"},
    "/v1/translate": {"texts": ["Ein Mann fährt Fahrrad."]},
    "/v1/completions": {"model": "gpt", "prompt": "ROMEO:", "max_tokens": 16, "temperature": 0.8, "top_k": 40,
                        "seed": 7, "stop": ["\n\n"]},
    "/v1/chat/completions": {"model": "gpt", "messages": [{"role": "user", "content": "Who art thou?"}],
                             "max_tokens": 16, "temperature": 0.8, "seed": 7},
}


class _Translator:
    beam_size = 1


class _Served:
    def __init__(self, name, kind):
        self.name, self.kind, self.precision = name, kind, "float32"
        self.source_language, self.target_language = ("de", "en") if kind == "translator" else (None, None)
        self.translator = _Translator()
        self.tokenizer = object()   # no chat_template: the plain one
        self.vocab_size, self.max_seq_len = 50257, 1024


class StandInEngine:
    """AsyncEngine's face, answering at once: what the app costs is all that is timed."""

    def __init__(self):
        self.models = [_Served("de-en", "translator"), _Served("gpt", "generator")]

    def model(self, name=None, precision=None, kind="translator"):
        for m in self.models:
            if m.kind == kind and name in (None, m.name):
                return m
        raise engine_module.UnknownModel(f"{kind} {name!r} is not served")

    def translate(self, texts, **options):
        done = asyncio.get_running_loop().create_future()
        done.set_result(["A man rides a bike."] * len(texts))
        return done

    async def complete(self, prompt, **options):
        if hasattr(engine_module, "Completion"):
            return engine_module.Completion(" Thou art a man.", "stop", 3, 5)
        return {"text": " Thou art a man.", "finish_reason": "stop", "prompt_tokens": 3, "completion_tokens": 5}

    def check_room(self, entering=0):
        pass

    def stats(self):
        return {}

    def close(self):
        pass


async def one_request(app, path, body):
    """Sends one POST with a JSON body to the app; returns the status."""
    sent = []
    raw = json.dumps(body).encode()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "path": path,
             "raw_path": path.encode(), "query_string": b"", "root_path": "", "scheme": "http",
             "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 50000),
             "headers": [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(raw)).encode())]}
    messages = [{"type": "http.request", "body": raw, "more_body": False}]

    async def receive():
        if messages:
            return messages.pop()
        await asyncio.Event().wait()   # the client never goes away

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    return sent[0]["status"]


async def measure(app, path, body, requests):
    """Microseconds a request, the garbage collector held off while timing: its passes come when the objects made
    reach a threshold, which lands in one round or another and moved the figures by a fifth between runs."""
    for _ in range(200):   # warm
        assert await one_request(app, path, body) == 200, path
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(requests):
            await one_request(app, path, body)
        return (time.perf_counter() - start) / requests * 1e6
    finally:
        gc.enable()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    app = create_app(StandInEngine())

    async def run():
        out = {}
        for path, body in BODIES.items():
            out[path] = statistics.median([await measure(app, path, body, args.requests) for _ in range(args.rounds)])
        return out

    for path, us in asyncio.run(run()).items():
        print(f"{path:24s} {us:7.1f} us a request")


if __name__ == "__main__":
    main()
