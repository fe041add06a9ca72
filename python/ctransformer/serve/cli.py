"""ctransformer-serve: serve translators (and GPTs) over HTTP, with the requests of every client batched together.

  ctransformer-serve --model opus-mt-de-en                    # a Hugging Face Marian directory
  ctransformer-serve --model de-en=runs/multi30k.ckpt --precision int8 --port 8080

--model [NAME=]PATH, as often as wanted: PATH is a Hugging Face Marian directory (an opus-mt model), a
checkpoint of `ctransformer-train multi30k` (a translator), a Hugging Face GPT-2 directory or a checkpoint of
`ctransformer-train shakespeare` (a GPT, answering /v1/completions); NAME (what requests ask for) defaults to the folder's or the
file's name. --precision (repeatable, or comma-separated) serves each model in each precision listed; a
quantised checkpoint is served in int8 when --precision is not given.

One process, one copy of each model: the server listens at once and answers /ready with 503 until the
models are loaded, then prints one line, "ctransformer-serve: listening on http://HOST:PORT ...". SIGTERM
(or a first Ctrl-C) drains: /ready and new requests answer 503, every accepted request gets its answer
within --shutdown-timeout seconds, and the process exits 0. Endpoints, limits and metrics: docs/serve.md.
"""
import argparse
import asyncio
import gc
import os
import re
import signal
import sys

from ctransformer import precision as _precision

PRECISIONS = _precision.SERVING
# The maths' threads run this much nicer than the event loop (Linux), so that answering HTTP (a 429 above all) does
# not wait behind a decoding step on a busy core (docs/serve.md, "Under load", has the figures).
DEFAULT_NICE = 10 if sys.platform.startswith("linux") else 0


def parse_model(spec):
    """(name, path) of a --model value: NAME=PATH, or PATH alone (a path that exists wins, even with a '=')."""
    name, sep, path = spec.partition("=")
    if not sep or os.path.exists(spec) or not name or os.sep in name:
        name, path = None, spec
    if name is None:
        base = os.path.basename(os.path.normpath(path))
        name = base if os.path.isdir(path) else os.path.splitext(base)[0]
    return name, path


# A language pair in a name: de-en, opus-mt-de-en (Helsinki-NLP's), zh-en, pt_br-en; codes of 2 or 3 letters, with a
# region or script after them (pt-BR: a region of a code, not a pair of its own, so only with "_").
_PAIR = re.compile(r"(?:opus-mt-)?([a-z]{2,3}(?:_[A-Za-z]{2,4})?)-([a-z]{2,3}(?:_[A-Za-z]{2,4})?)")
_CODE = re.compile(r"[a-z]{2,3}(?:[-_][A-Za-z]{2,4})?")


def language_pair(name):
    """(source, target) language codes a served name says (de-en, opus-mt-de-en), or None."""
    found = _PAIR.fullmatch(name or "")
    return found.groups() if found else None


def parse_languages(values, names):
    """{model name: (source, target)} of the --languages values: NAME=SRC:TGT, or SRC:TGT when one model is served.
    ValueError naming what is wrong."""
    pairs = {}
    for value in values or []:
        name, sep, pair = value.rpartition("=")
        if not sep:
            if len(names) != 1:
                raise ValueError(f"--languages {value}: name the model (NAME=SRC:TGT) when several are served")
            name = names[0]
        if name not in names:
            raise ValueError(f"--languages {value}: no --model is named {name!r} (served: {', '.join(names)})")
        source, colon, target = pair.partition(":")
        if not colon or not _CODE.fullmatch(source) or not _CODE.fullmatch(target):
            raise ValueError(f"--languages {value}: expected SRC:TGT language codes, as de:en")
        pairs[name] = (source, target)
    return pairs


def load_translator(path):
    """(Translator, (source, target) language codes or None) for a Marian directory or a multi30k checkpoint."""
    from ctransformer.translator import Translator, load_translation_checkpoint

    quiet = lambda message: None   # noqa: E731 - a truncation warning per request would flood the server's log
    if os.path.isdir(path):
        translator = Translator.from_pretrained(path, warn=quiet)
        # opus-mt's directories are named after their pair (opus-mt-de-en); config.json does not say it.
        return translator, language_pair(os.path.basename(os.path.normpath(path)))
    model, vocab, cfg = load_translation_checkpoint(path)
    translator = Translator(model, vocab, beam_size=cfg["beam_size"], length_penalty=cfg["length_penalty"],
                            max_len_ratio=cfg["max_len_ratio"], warn=quiet)   # as ctransformer-translate does
    # The multi30k task trains German to English unless it was given files of its own.
    return translator, None if cfg.get("train_src") else ("de", "en")


def load_model(path):
    """("translator", Translator, languages) for a Marian directory or a multi30k checkpoint, or ("generator",
    (GPT, tokenizer, end id or None), None) for a Hugging Face GPT-2 directory (its byte-level BPE; a continuation
    ends at <|endoftext|>) or a checkpoint of the shakespeare task (a GPT)."""
    if os.path.isdir(path) and _model_type(path) == "gpt2":
        import ctransformer as ct
        from ctransformer.gpt2 import GPT2Tokenizer

        tokenizer = GPT2Tokenizer(path)
        return "generator", (ct.nn.GPT.from_pretrained(path), tokenizer, tokenizer.eos_token_id), None
    if os.path.isfile(path):
        from ctransformer.checkpoint import read_checkpoint_contents

        extra = read_checkpoint_contents(path)["extra"]
        if extra.get("task") == "shakespeare" or (extra.get("task") is None and "sentencepiece" not in extra):
            from ctransformer.tasks.shakespeare import load_gpt_checkpoint

            return "generator", (*load_gpt_checkpoint(path), None), None
    translator, pair = load_translator(path)
    return "translator", translator, pair


def _model_type(folder):
    """config.json's model_type in a Hugging Face directory (None when it has none or it is not JSON)."""
    import json

    try:
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
            return json.load(f).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None


def build_parser():
    parser = argparse.ArgumentParser(prog="ctransformer-serve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", required=True, metavar="[NAME=]PATH",
                        help="a Hugging Face Marian directory, a multi30k checkpoint or a shakespeare (GPT) "
                             "checkpoint (repeatable)")
    parser.add_argument("--languages", action="append", metavar="[NAME=]SRC:TGT",
                        help="the language pair a translator translates, for LibreTranslate's /languages and its "
                             "routing by source and target (repeatable); default: from its name (de-en, "
                             "opus-mt-de-en), its directory's name, or its checkpoint")
    parser.add_argument("--precision", action="append", metavar="P",
                        help="float32 (default), bfloat16 or int8; repeat or comma-separate to serve several")
    parser.add_argument("--host", metavar="HOST", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", metavar="PORT", type=int, default=8000,
                        help="port (default 8000; 0 picks a free one)")
    parser.add_argument("--max-queue", metavar="N", type=int, default=256,
                        help="requests waiting for rows before 429 (default 256)")
    parser.add_argument("--max-rows", metavar="N", type=int, default=64, help="decoder rows in one batch (default 64)")
    parser.add_argument("--max-batch-tokens", metavar="N", type=int, default=4096,
                        help="source tokens admitted to the batch at one step (default 4096)")
    parser.add_argument("--shutdown-timeout", metavar="S", type=float, default=30.0,
                        help="seconds SIGTERM waits for accepted requests (default 30)")
    parser.add_argument("--api-key", metavar="KEY", default=None,
                        help="require this key (api_key field or 'Authorization: Bearer KEY'); default: none. "
                             "The CTRANSFORMER_API_KEY variable gives it without showing it in the process list")
    parser.add_argument("--max-texts", metavar="N", type=int, default=64, help="texts in one request (default 64)")
    parser.add_argument("--max-text-chars", metavar="N", type=int, default=5000,
                        help="characters in one text (default 5000)")
    parser.add_argument("--max-body-bytes", metavar="N", type=int, default=1 << 20,
                        help="bytes in one request body (default 1 MiB)")
    parser.add_argument("--body-timeout", metavar="S", type=float, default=60.0,
                        help="seconds a request body may pause before the request gets 408 and its connection is "
                             "closed (default 60, as nginx's client_body_timeout)")
    parser.add_argument("--threads", metavar="N", type=int, default=None,
                        help="threads for the maths (default: all cores)")
    parser.add_argument("--nice", metavar="N", type=int, default=DEFAULT_NICE,
                        help="Linux: run the maths' threads N nice levels (0-19) below the HTTP event loop, so that "
                             f"answers and refusals do not wait for a decoding step (default {DEFAULT_NICE}; 0 "
                             "elsewhere, where only 0 is accepted)")
    parser.add_argument("--lane-rows", metavar="N", type=int, default=16,
                        help="a translator's batch runs as one batch a thread from N rows a thread, back to one batch "
                             "under N/2 (default 16; 0: never)")
    parser.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"],
                        help="uvicorn's log level (default warning)")
    parser.add_argument("--access-log", action="store_true", help="log every request (uvicorn's access log)")
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        import uvicorn
        import starlette  # noqa: F401
        import prometheus_client  # noqa: F401
    except ImportError as error:
        parser.exit(2, f"ctransformer-serve: error: {error.name} is missing: pip install \"ctransformer[serve]\"\n")
    models = [parse_model(spec) for spec in args.model]
    names = [name for name, _ in models]
    for name, path in models:
        if not os.path.exists(path):
            parser.error(f"--model {path}: no such file or directory")
        if names.count(name) > 1:
            parser.error(f"--model: two models are named {name!r}; name them with NAME=PATH")
    try:
        languages = parse_languages(args.languages, names)
    except ValueError as error:
        parser.error(str(error))
    try:
        precisions = list(dict.fromkeys(_precision.canonical(p.strip(), PRECISIONS, "ctransformer-serve", "--precision")
                                        for value in (args.precision or ["float32"]) for p in value.split(",")))
    except ValueError as error:
        parser.error(str(error))
    for option in ("max_queue", "max_rows", "max_batch_tokens", "max_texts", "max_text_chars", "max_body_bytes"):
        if getattr(args, option) < 1:
            parser.error(f"--{option.replace('_', '-')} must be >= 1, got {getattr(args, option)}")
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be from 0 to 65535, got {args.port}")
    if not args.body_timeout > 0:
        parser.error(f"--body-timeout must be above 0, got {args.body_timeout}")
    if args.lane_rows < 0:
        parser.error(f"--lane-rows must be >= 0, got {args.lane_rows}")
    if not 0 <= args.nice <= 19:
        parser.error(f"--nice must be from 0 to 19, got {args.nice}")
    if args.nice and not sys.platform.startswith("linux"):
        parser.error(f"--nice: thread priorities are set on Linux only; give --nice 0 (got {args.nice})")
    api_key = args.api_key or os.environ.get("CTRANSFORMER_API_KEY") or None

    import ctransformer as ct
    from ctransformer.serve.app import create_app
    from ctransformer.serve.engine import AsyncEngine

    if args.threads:
        ct.set_num_threads(args.threads)
    engine = AsyncEngine(max_queue=args.max_queue, max_rows=args.max_rows, max_batch_tokens=args.max_batch_tokens,
                         nice=args.nice, lane_rows=args.lane_rows)

    async def load_models():
        # The files are read in a thread, so /health and /ready answer meanwhile; each model is handed to the
        # engine on the event loop's thread, as every later call to it is made.
        for name, path in models:
            kind, loaded, pair = await asyncio.to_thread(load_model, path)
            source, target = languages.get(name) or language_pair(name) or pair or (None, None)
            model = loaded.model if kind == "translator" else loaded[0]
            # A quantised checkpoint runs in int8 only; without --precision, that is what it is served in.
            quantised = model.quantization is not None and args.precision is None
            for chosen in ["int8"] if quantised else precisions:   # int8: the engine quantises a copy of its own
                if kind == "translator":
                    engine.add_translator(name, loaded, chosen, source_language=source, target_language=target)
                else:
                    engine.add_generator(name, loaded[0], loaded[1], chosen, end_id=loaded[2])
        # What is loaded lives as long as the server: out of the garbage collector's sight, its full passes scan
        # the requests' objects only (a pass over every object stalls the event loop past saturation).
        gc.collect()
        gc.freeze()

    app = create_app(engine, api_key=api_key, max_texts=args.max_texts, max_text_chars=args.max_text_chars,
                     max_body_bytes=args.max_body_bytes, shutdown_timeout=args.shutdown_timeout,
                     startup=load_models, body_timeout=args.body_timeout)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level, access_log=args.access_log,
                            lifespan="on", timeout_graceful_shutdown=2)
    server = _server_class()(config, app, args.shutdown_timeout)
    try:
        server.run()
    except KeyboardInterrupt:   # a second Ctrl-C while draining: out at once
        return 130
    return server.exit_code


def _server_class():
    import uvicorn   # the serve extra: imported once the command line is known to need it

    class Server(uvicorn.Server):
        """uvicorn's server, with a drain on SIGTERM in place of its stop: uvicorn would close the listening
        socket at once, so new requests would be refused by the system instead of answered 503, and a load
        balancer could not tell a drain from a crash."""

        def __init__(self, config, app, shutdown_timeout):
            super().__init__(config)
            self.app, self.shutdown_timeout = app, shutdown_timeout
            self.exit_code, self.loop, self.draining = 0, None, False

        async def startup(self, sockets=None):
            await super().startup(sockets)
            if self.started:
                self.loop = asyncio.get_running_loop()
                self.announcing = self.loop.create_task(self.announce())

        async def announce(self):
            serving = self.app.state.serving
            while not serving.ready and serving.load_error is None:
                await asyncio.sleep(0.02)
            if serving.load_error is not None:
                print(f"ctransformer-serve: error: could not load the models: {serving.load_error}", file=sys.stderr,
                      flush=True)
                self.exit_code, self.should_exit = 1, True
                return
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            served = ", ".join(f"{m.name} ({m.precision})" for m in self.app.state.engine.models)
            print(f"ctransformer-serve: listening on http://{host}:{port} serving {served}", flush=True)

        def handle_exit(self, sig, frame):
            # Runs as the signal handler (SIGTERM, SIGINT), on the loop's thread between two bytecodes: it only
            # schedules the drain.
            if self.draining and sig == signal.SIGTERM:
                return   # already draining
            if self.loop is None or self.draining:   # not started yet, or a second Ctrl-C: uvicorn's stop
                return super().handle_exit(sig, frame)
            self.draining = True
            self.loop.call_soon_threadsafe(lambda: self.loop.create_task(self.drain()))

        async def drain(self):
            print(f"ctransformer-serve: draining (up to {self.shutdown_timeout:g} s for the accepted requests)",
                  file=sys.stderr, flush=True)
            if not await self.app.state.drain(self.shutdown_timeout):
                print("ctransformer-serve: the shutdown timeout passed with requests unanswered", file=sys.stderr,
                      flush=True)
            self.should_exit = True

    return Server


if __name__ == "__main__":
    sys.exit(main())
