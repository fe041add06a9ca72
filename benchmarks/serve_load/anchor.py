"""The CTranslate2 anchor servers: a minimal Starlette app exposing ctransformer-serve's POST /v1/translate, calling
translate_batch once per request (ct2-per-request) or once per 10 ms window (ct2-batching). Each runs in a child
process of its own, as the benchmark runs every server under test:

    python -m serve_load.anchor MODE --ct2-model FOLDER --spm FILE.model [...]

with the benchmarks folder on the path (command and child_env give both)."""
import argparse
import asyncio
import collections
import contextlib
import json
import os
import socket
import sys
import threading
import time

from .settings import MAX_BATCH, THREADS

MODES = ("ct2-per-request", "ct2-batching")
WINDOW_MS = 10.0             # the batching anchor's collection window
BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def command(mode):
    """The argv that starts `mode`'s server: this module by name (-m), so that its imports of the package hold; the
    child finds the package through child_env's PYTHONPATH."""
    return [sys.executable, "-m", __name__, mode]


def child_env(env):
    """`env` with the benchmarks folder first on PYTHONPATH: the package, and ct2_process beside it, whatever folder
    the child starts in (a child run by -m has the folder it starts in on its path, not the package's parent)."""
    paths = [BENCHMARKS] + [path for path in env.get("PYTHONPATH", "").split(os.pathsep) if path]
    return dict(env, PYTHONPATH=os.pathsep.join(paths))


def anchor_server(argv):
    p = argparse.ArgumentParser(prog="python -m serve_load.anchor")
    p.add_argument("mode", choices=MODES)
    p.add_argument("--ct2-model", required=True)
    p.add_argument("--spm", required=True, help="the sentencepiece .model file")
    p.add_argument("--compute-type", default="float32")
    p.add_argument("--intra-threads", type=int, default=THREADS)
    p.add_argument("--max-queue", type=int, default=256, help="sentences waiting before 429")
    p.add_argument("--max-batch", type=int, default=MAX_BATCH)
    p.add_argument("--window-ms", type=float, default=WINDOW_MS)
    p.add_argument("--max-source", type=int, default=199, help="source subwords kept (the model's positions less one)")
    a = p.parse_args(argv)

    import concurrent.futures

    import ctranslate2
    import sentencepiece
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from ct2_process import _load

    parent = os.getppid()

    def orphaned():   # the benchmark went away without stopping this server: stop too
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)
    threading.Thread(target=orphaned, daemon=True).start()

    translator = _load(ctranslate2, {"path": a.ct2_model, "compute_type": a.compute_type,
                                     "intra_threads": a.intra_threads})
    sp = sentencepiece.SentencePieceProcessor(model_file=a.spm)
    special = {sp.pad_id(), sp.bos_id(), sp.eos_id()}
    eos = sp.id_to_piece(sp.eos_id())
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ct2")
    options = dict(beam_size=1, max_batch_size=a.max_batch)
    state = {"waiting": 0}   # sentences accepted and not yet handed to translate_batch (the loop's thread only)

    def tokens(text):
        return sp.encode(text, out_type=str)[:a.max_source] + [eos]

    def detokenize(pieces):
        return sp.decode([i for i in (sp.piece_to_id(x) for x in pieces) if i not in special])

    def run(batch, max_len):
        results = translator.translate_batch(batch, max_decoding_length=max_len, **options)
        return [detokenize(r.hypotheses[0]) for r in results]

    def refuse(status, message, **headers):
        return JSONResponse({"error": message}, status_code=status, headers=headers or None)

    loop_state = {}

    async def startup():
        loop_state["loop"] = asyncio.get_running_loop()
        if a.mode == "ct2-batching":
            loop_state["wake"] = asyncio.Event()
            loop_state["pending"] = collections.deque()
            loop_state["batcher"] = asyncio.ensure_future(batcher())

    async def batcher():
        """Sentences collected for up to window_ms from the first one's arrival, or max_batch of them, then one
        translate_batch; the next batch is collected while this one runs (they are waiting meanwhile)."""
        loop, wake, pending = loop_state["loop"], loop_state["wake"], loop_state["pending"]
        while True:
            while not pending:
                wake.clear()
                await wake.wait()
            deadline = pending[0][2] + a.window_ms / 1000.0
            while len(pending) < a.max_batch:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                wake.clear()
                try:
                    await asyncio.wait_for(wake.wait(), remaining)
                except asyncio.TimeoutError:
                    break
            batch = [pending.popleft() for _ in range(min(a.max_batch, len(pending)))]
            state["waiting"] -= len(batch)
            groups = collections.defaultdict(list)   # one call per max_decoding_length asked (the load asks one)
            for item in batch:
                groups[item[3]].append(item)
            for max_len, items in groups.items():
                try:
                    texts = await loop.run_in_executor(executor, run, [item[0] for item in items], max_len)
                    for item, text in zip(items, texts):
                        if not item[1].done():
                            item[1].set_result(text)
                except Exception as error:  # noqa: BLE001 - answered as a 500 to each request of the batch
                    for item in items:
                        if not item[1].done():
                            item[1].set_exception(error)

    async def translate(request):
        try:
            data = json.loads(await request.body())
            texts = data["texts"]
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                raise ValueError("texts: expected a list of strings")
            if data.get("stream"):
                return refuse(400, "stream: not served by this anchor")
            if data.get("beam_size", 1) != 1:
                return refuse(400, "beam_size: this anchor decodes greedily")
            max_len = int(data.get("max_decoding_length") or 256)
        except (ValueError, KeyError, TypeError) as error:
            return refuse(400, f"body: {error}")
        keep = [i for i, t in enumerate(texts) if t.strip()]
        if state["waiting"] + len(keep) > a.max_queue:
            return refuse(429, f"queue: {state['waiting']} sentences waiting", **{"Retry-After": "1"})
        out = [""] * len(texts)
        batch = [tokens(texts[i]) for i in keep]
        loop = loop_state["loop"]
        state["waiting"] += len(batch)
        if a.mode == "ct2-per-request":
            def call():   # on the executor's thread: the count is changed on the loop's
                loop.call_soon_threadsafe(started, len(batch))
                return run(batch, max_len)
            try:
                results = await loop.run_in_executor(executor, call) if batch else []
            except Exception as error:  # noqa: BLE001
                return refuse(500, f"server: {error!r}")
        else:
            futures = [loop.create_future() for _ in batch]
            now = loop.time()
            for source, future in zip(batch, futures):
                loop_state["pending"].append((source, future, now, max_len))
            loop_state["wake"].set()
            try:
                results = await asyncio.gather(*futures)
            except Exception as error:  # noqa: BLE001
                return refuse(500, f"server: {error!r}")
        for i, text in zip(keep, results):
            out[i] = text
        return JSONResponse({"translations": out})

    async def ready(request):
        return JSONResponse({"status": "ready"})

    def started(n):
        state["waiting"] -= n

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await startup()
        try:
            yield
        finally:
            if "batcher" in loop_state:
                loop_state["batcher"].cancel()
            executor.shutdown(wait=False, cancel_futures=True)

    app = Starlette(routes=[Route("/v1/translate", translate, methods=["POST"]), Route("/ready", ready),
                            Route("/health", ready)], lifespan=lifespan)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", log_level="warning", access_log=False,
                                           lifespan="on", timeout_graceful_shutdown=2))
    print(f"{a.mode}: listening on http://127.0.0.1:{sock.getsockname()[1]} "
          f"(CTranslate2 {ctranslate2.__version__} {translator.compute_type}, "
          f"{' '.join(f'{k}={v}' for k, v in os.environ.items() if k.startswith('CT2_')) or 'its defaults'})",
          flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    anchor_server(sys.argv[1:])
