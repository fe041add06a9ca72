"""The continuous-batching engine from asyncio: ``AsyncEngine`` puts the C++ engine (``ct._core.serve.Engine``) behind
awaitable ``translate`` and ``complete`` and the async iterators ``stream`` and ``stream_completion``, for the server
(``ctransformer.serve.app``) or any asyncio program.

The C++ engine decodes on a thread of its own without the GIL; it merges every request it holds into one batch per
model, each sequence at its own position (``cpp/include/ctransformer/serve/engine.hpp``). Here, one poller thread
collects its events (a streamed request's tokens as they come, each finished output) and hands each to the
asyncio loop of the request that waits for it. Tokenising and detokenising stay in Python, on the caller's loop.

A translation through the engine equals ``Translator.translate([text], ...)`` of that text alone with the same
options (ids equal wherever the top-two logits are not within float32 rounding of each other: the products'
summation order depends on how many rows a batch has; an int8 model's requests come out bit for bit). Beams search
by the translator's rules: GNMT's, or transformers' for a pretrained Marian model (``search="hf"``).
"""
import asyncio
import atexit
import copy
import math
import os
import threading
import time
import weakref
from typing import NamedTuple, Optional

import ctransformer as ct
from ctransformer import _core
from ctransformer import precision as _precision

__all__ = ["AsyncEngine", "Completion", "EngineClosed", "Piece", "QueueFull", "Sampling", "ServedModel", "Token",
           "UnknownModel", "PRECISIONS", "stop_strings"]

PRECISIONS = _precision.SERVING
"""The precisions a model is served in."""
MAX_LOGPROBS = 20
"""The most alternatives a token's logprobs may list (OpenAI's top_logprobs limit; the engine's too)."""


class QueueFull(Exception):
    """The engine's waiting queue is full; try again after ``retry_after`` seconds."""

    def __init__(self, message, retry_after=1.0):
        super().__init__(message)
        self.retry_after = retry_after


class UnknownModel(KeyError):
    """No model is served under the name (and precision) asked for."""

    def __str__(self):
        return str(self.args[0]) if self.args else "unknown model"


class EngineClosed(RuntimeError):
    """The engine is draining or closed: it takes no new request."""


class Token(NamedTuple):
    """One generated token with its log-probability (a request's logprobs): its text alone, its logprob (the model's,
    before the request's adjustments and temperature), the likeliest alternatives as (text, logprob), most likely
    first, and where its text starts in the completion's (characters)."""
    text: str
    logprob: float
    top: tuple
    offset: int


class Piece(NamedTuple):
    """A streamed completion's piece: its text, the finish reason (None until the last piece, whose text is ""), and
    the Tokens it brought (None unless logprobs were asked for)."""
    text: str
    finish_reason: Optional[str]
    tokens: Optional[tuple] = None


class Completion(NamedTuple):
    """complete()'s answer: the text, the finish reason ("stop" at the end id or a stop string, else "length"), the
    prompt's and the completion's token counts, and the Tokens (None unless logprobs were asked for)."""
    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    tokens: Optional[list] = None


class Sampling:
    """A completion's options, checked once (ValueError naming the option): max_tokens (16), temperature (1; 0 takes
    the first maximum), top_k (0: every id), top_p (1), seed (None: a random one), stop (a string or up to 4),
    logit_bias ({token id: -100 to 100}), presence_penalty and frequency_penalty (-2 to 2, OpenAI's definitions),
    logprobs (None; n: each token's log-probability with the n likeliest, 0 to 20)."""
    __slots__ = ("max_tokens", "temperature", "top_k", "top_p", "seed", "stop", "logit_bias", "presence_penalty",
                 "frequency_penalty", "logprobs")

    def __init__(self, max_tokens=16, temperature=1.0, top_k=None, top_p=None, seed=None, stop=None, logit_bias=None,
                 presence_penalty=None, frequency_penalty=None, logprobs=None):
        self.max_tokens = _check_int(max_tokens, "max_tokens", 1)
        self.temperature = _check_real(temperature, "temperature", 0)
        self.top_k = 0 if top_k is None else _check_int(top_k, "top_k", 0)
        self.top_p = 1.0 if top_p is None else _check_real(top_p, "top_p", 0)
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not -2**63 <= seed < 2**63):
            raise ValueError(f"seed must be an integer in [-2**63, 2**63), got {seed!r}")
        self.seed = seed   # as OpenAI's: no seed, no promise of the same text twice
        self.stop = stop_strings(stop)
        self.logit_bias = _logit_bias(logit_bias)
        self.presence_penalty = _penalty(presence_penalty, "presence_penalty")
        self.frequency_penalty = _penalty(frequency_penalty, "frequency_penalty")
        if logprobs is not None and (_check_int(logprobs, "logprobs", 0) > MAX_LOGPROBS):
            raise ValueError(f"logprobs must be an integer from 0 to {MAX_LOGPROBS}, got {logprobs!r}")
        self.logprobs = logprobs

    def seeded(self, seed):
        """The same options with another seed (choice i of a request samples from its seed + i); not checked again."""
        other = copy.copy(self)
        other.seed = seed
        return other


class ServedModel:
    """One model the engine serves: a name, a precision, and its kind: "translator" (the Translator whose vocabulary
    and options it uses) or "generator" (a GPT with its tokenizer: text continued)."""

    def __init__(self, name, precision, translator, key, source_language=None, target_language=None, kind="translator",
                 tokenizer=None, end_id=None, max_seq_len=None, vocab_size=None):
        self.name, self.precision, self.translator, self.key = name, precision, translator, key
        self.source_language, self.target_language = source_language, target_language
        self.kind, self.tokenizer, self.end_id, self.max_seq_len = kind, tokenizer, end_id, max_seq_len
        self.vocab_size = vocab_size   # a generator's: the ids a logit_bias may name

    def __repr__(self):
        return f"ServedModel({self.name!r}, {self.precision!r})"


class _Request:
    """Where a request's events go: `deliver(index, event)`, called on the loop of the caller that waits for it."""
    __slots__ = ("loop", "deliver", "index")

    def __init__(self, loop, deliver, index):
        self.loop, self.deliver, self.index = loop, deliver, index


def _deliver(batch):
    """On a caller's loop: the events the poller collected for that loop's requests, in the engine's order."""
    for request, event in batch:
        request.deliver(request.index, event)


def _into(queue):
    """A stream's delivery: each event into its queue."""
    return lambda _, event: queue.put_nowait(event)


class _Outcome:
    """The Future of a call's requests (one per text), resolved by their deliveries: with finish(ends, *args) once
    each has finished (ends[i], the finished ids of the i-th), or with the error of the first to fail (the others
    are cancelled then). Cancelling the Future frees the rows of those not finished.

    One object with slots, rather than a task awaiting a queue or closures over cells: a waiting request's objects
    are what the garbage collector's passes walk, and past saturation hundreds wait at once."""
    __slots__ = ("future", "engine", "ends", "left", "rids", "finish", "args")

    def __init__(self, engine, count, finish, *args):
        self.future = asyncio.get_running_loop().create_future()
        self.engine, self.ends, self.left, self.rids, self.finish, self.args = engine, [None] * count, count, [], \
            finish, args

    def __call__(self, i, event):
        future = self.future
        if future.done():
            return
        kind = event.kind
        if kind == "finished":
            self.ends[i] = event
            self.left -= 1
            if not self.left:
                try:
                    future.set_result(self.finish(self.ends, *self.args))
                except Exception as error:  # noqa: BLE001 - the caller's to see, as an awaited call's would be
                    future.set_exception(error)
        elif kind != "token":
            self.ends[i] = ()   # ended: nothing to cancel
            future.set_exception(_failure(kind, event.message))
            self.engine._cancel_unfinished(self.rids, self.ends, counted=False)

    def start(self, submit):
        """The Future, once submit(i, self) has sent each request (and returned its id); if one cannot be sent, those
        sent already are cancelled and the error raised."""
        try:
            for i in range(len(self.ends)):
                self.rids.append(submit(i, self))
        except BaseException:
            self.future.cancel()
            self.engine._cancel_unfinished(self.rids, self.ends, counted=False)
            raise
        self.future.add_done_callback(self._done)
        return self.future

    def _done(self, future):
        if future.cancelled():
            self.engine._cancel_unfinished(self.rids, self.ends, counted=True)


def _check_int(value, name, minimum):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _timeout(timeout_ms):
    """Seconds for the engine (0: none) from a request's timeout_ms (None, or a number > 0)."""
    if timeout_ms is None:
        return 0.0
    if _check_real(timeout_ms, "timeout_ms", 0) <= 0:
        raise ValueError(f"timeout_ms must be > 0, got {timeout_ms!r}")
    return float(timeout_ms) / 1000.0


def _check_real(value, name, minimum):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= minimum or value != value:
        raise ValueError(f"{name} must be a number >= {minimum}, got {value!r}")
    return float(value)


class AsyncEngine:
    """Continuous batching of translation and generation requests, awaited from asyncio.

    ``max_queue`` requests (sentences, prompts) may wait for a place in a batch; ``max_rows`` decoder rows (a beam of
    k takes k) and ``max_batch_tokens`` input tokens make one model's batch. ``add_translator`` serves a Translator
    under a name in a precision (``float32``, ``bfloat16`` or ``int8``), ``translate`` and ``stream`` send it
    requests; ``add_generator`` serves a GPT, ``complete`` and ``stream_completion`` continue prompts.

    ``nice`` (Linux only): the engine's thread and the thread pool's workers run that many nice levels (0-19) above
    the calling thread, for the rest of the process, so that the event loop gets a core as soon as it has work
    (``ctransformer-serve`` passes 10).

    ``lane_rows``: a Transformer's batch (float32 or int8) runs as one batch a thread, each stepped on its own, once
    its rows (waiting ones counted) reach ``lane_rows`` a thread, and merges back under half as many (docs/DESIGN.md,
    "Lanes"); 0: never, 1: whenever there are rows for every thread."""

    def __init__(self, max_queue=256, max_rows=64, max_batch_tokens=4096, nice=0, lane_rows=16):
        self._engine = _core.serve.Engine(max_queue=max_queue, max_rows=max_rows, max_batch_tokens=max_batch_tokens,
                                          nice=nice, lane_rows=lane_rows)
        self.max_queue = max_queue
        self._models = {}
        self._waiting = {}            # request id -> _Request
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._draining = False
        self._poller = threading.Thread(target=self._poll, name="ctransformer-serve-poller", daemon=True)
        self._poller.start()
        self._counts = {"requests_total": 0, "cancelled_total": 0, "timed_out_total": 0, "rejected_total": 0}
        _open_engines.add(self)

    # -- models ----------------------------------------------------------------------------------------------------
    def add_translator(self, name, translator, precision="float32", source_language=None, target_language=None):
        """Serve `translator` (a ``ct.translate.Translator``) under `name` in `precision`. int8 quantises a copy of
        its model (the float32 model stays as it was); bfloat16 runs its products under autocast. A model that is
        int8 already (a quantised checkpoint) is served in int8 only."""
        precision = self._new_key(name, precision, "add_translator")
        model = translator.model
        if model.quantization is not None and precision != "int8":
            raise ValueError(f"AsyncEngine.add_translator: {name!r} holds an int8 model; it is served in int8 only")
        if precision == "int8" and model.quantization is None:
            model = ct.quantize_dynamic(model, "int8")
        model.eval()
        if model is not translator.model:   # a translator of its own for the quantised copy (the offline path)
            translator = _translator_like(translator, model)
        key = f"{name}/{precision}"
        self._engine.add_model(key, model, translator.start_id, translator.end_id, banned=list(translator.banned),
                               force_end=translator.force_end, bf16=precision == "bfloat16")
        served = ServedModel(name, precision, translator, key, source_language, target_language)
        self._models[(name, precision)] = served
        return served

    def add_generator(self, name, model, tokenizer, precision="float32", end_id=None):
        """Serve a GPT (``ct.nn.GPT``) under `name` in `precision`, its text read and written by `tokenizer` (an
        object with ``encode(str) -> ids`` and ``decode(ids) -> str``); a continuation ends at `end_id` when given.
        int8 quantises a copy; bfloat16 runs its products under autocast."""
        precision = self._new_key(name, precision, "add_generator")
        _arguments_tokenizer(tokenizer)
        if model.quantization is not None and precision != "int8":
            raise ValueError(f"AsyncEngine.add_generator: {name!r} holds an int8 model; it is served in int8 only")
        if precision == "int8" and model.quantization is None:
            model = ct.quantize_dynamic(model, "int8")
        model.eval()
        key = f"{name}/{precision}"
        self._engine.add_model(key, model, end_symbol=end_id, bf16=precision == "bfloat16")
        served = ServedModel(name, precision, None, key, kind="generator", tokenizer=tokenizer, end_id=end_id,
                             max_seq_len=model.max_seq_len, vocab_size=model.vocab_size)
        self._models[(name, precision)] = served
        return served

    def _new_key(self, name, precision, caller):
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"AsyncEngine.{caller}: name must be a non-empty str without '/', got {name!r}")
        precision = _precision.canonical(precision, PRECISIONS, f"AsyncEngine.{caller}")
        if (name, precision) in self._models:
            raise ValueError(f"AsyncEngine.{caller}: {name!r} is served in {precision} already")
        return precision

    @property
    def models(self):
        """Every served model, in the order they were added."""
        return list(self._models.values())

    def model(self, name=None, precision=None, kind="translator"):
        """The served model `name` in `precision` (None: the first one added with that name, or of any name) of this
        kind ("translator" or "generator")."""
        if precision is not None:
            try:
                precision = _precision.canonical(precision, PRECISIONS, "precision")
            except ValueError as error:
                raise UnknownModel(str(error)) from None
        for served in self._models.values():
            if (name is None or served.name == name) and (precision is None or served.precision == precision) \
                    and served.kind == kind:
                return served
        served = ", ".join(f"{m.name} ({m.precision}, {m.kind})" for m in self._models.values()) or "none"
        asked = f"{kind} {name!r}" if name is not None else f"a {kind}"
        raise UnknownModel(f"{asked}{f' in {precision}' if precision else ''} is not served (served: {served})")

    # -- requests --------------------------------------------------------------------------------------------------
    def _options(self, served, beam_size, max_decoding_length, length_penalty, timeout_ms):
        t = served.translator
        beam_size = t.beam_size if beam_size is None else _check_int(beam_size, "beam_size", 1)
        alpha = t.alpha if length_penalty is None else _check_real(length_penalty, "length_penalty", 0)
        if max_decoding_length is not None:
            _check_int(max_decoding_length, "max_decoding_length", 1)
        return beam_size, alpha, max_decoding_length, _timeout(timeout_ms)

    @staticmethod
    def _translation_options(served, source, beam_size, alpha, max_decoding_length, n_best=1):
        """A translation's SequenceOptions: a beam searches by the translator's rules (GNMT's, or transformers' for
        a pretrained Marian model), as Translator.translate does; a beam of one is greedy decoding under either."""
        t = served.translator
        hf = t.search == "hf" and beam_size > 1
        return _core.serve.SequenceOptions(max_len=t.max_len(len(source), max_decoding_length), beam_size=beam_size,
                                           alpha=alpha, search="hf" if hf else "gnmt",
                                           early_stopping=t.early_stopping if hf else False, n_best=n_best)

    def _submit(self, served, source, options, timeout, deliver, index=0, tokens=False):
        """Sends one sequence (its SequenceOptions) to the engine; its events go to deliver(index, event) on the
        running loop. Returns its id."""
        if self._draining or self._closed.is_set():
            raise EngineClosed("the engine is draining: it takes no new request")
        request = _Request(asyncio.get_running_loop(), deliver, index)
        with self._lock:   # registered before the engine can answer it
            try:
                rid = self._engine.submit(served.key, source, options, timeout=timeout, tokens=tokens)
            except _core.serve.QueueFull as error:
                self._counts["rejected_total"] += 1
                raise QueueFull(str(error), retry_after=self._retry_after()) from None
            self._waiting[rid] = request
        self._counts["requests_total"] += 1
        return rid

    def _cancel_unfinished(self, rids, ends, counted):
        for rid, end in zip(rids, ends):
            if end is None:
                self._cancel(rid)
                if counted:
                    self._counts["cancelled_total"] += 1

    def check_room(self, entering=0):
        """QueueFull (counted as a refusal) when ``max_queue`` requests wait already, with `entering` more about to be
        sent, so that none can be accepted now. The server asks before it reads a request's body: past saturation
        half the requests are refused, and each refusal then costs the two cores the engine needs little more than
        its HTTP exchange."""
        if self._engine.stats()["queue_depth"] + entering >= self.max_queue:
            self._counts["rejected_total"] += 1
            raise QueueFull(f"the queue is full ({self.max_queue} requests waiting)", retry_after=self._retry_after())

    def _retry_after(self):
        """Seconds until a place is likely free: the queue's depth at the engine's recent pace, at least 1."""
        stats = self._engine.stats()
        per_step = stats["step_seconds_total"] / stats["steps_total"] if stats["steps_total"] else 0.05
        return max(1.0, round(per_step * 20 * max(1, stats["queue_depth"]) / max(1, stats["rows_in_use"]), 1))

    def _release(self, rid, finished, stopped=False):
        """A stream's end: no one waits for rid's events now; if it did not finish (closed, cancelled, failed, or
        stopped at a stop string), its rows are freed. A stop is no cancellation: the engine's count of cancelled
        requests leaves it out."""
        with self._lock:
            self._waiting.pop(rid, None)
        if not finished:
            self._engine.cancel(rid, counted=not stopped)
            if not stopped:
                self._counts["cancelled_total"] += 1

    def _cancel(self, rid):
        with self._lock:
            self._waiting.pop(rid, None)
        self._engine.cancel(rid)

    def translate(self, texts, model=None, precision=None, beam_size=None, max_decoding_length=None,
                  length_penalty=None, timeout_ms=None):
        """An asyncio Future (await it on the running loop) of the translations of `texts` (a list of str), in order,
        each as ``Translator.translate`` gives it offline with these options. The call itself raises what refuses
        the request: QueueFull, UnknownModel, ValueError (an option, named), EngineClosed; the Future, what ends it
        later: TimeoutError, EngineClosed. Cancelling the Future frees the requests' rows.

        A Future, not a coroutine: awaited through a task, a request's coroutine, task and context would live as
        long as it waits, for the garbage collector to walk."""
        return self._translate(texts, model, precision, beam_size, max_decoding_length, length_penalty, timeout_ms)

    def _translate(self, texts, model, precision, beam_size, max_decoding_length, length_penalty, timeout_ms,
                   n_best=None):
        """translate()'s Future, or with n_best hypotheses()'."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise ValueError("texts must be a list of str")
        served = self.model(model, precision)
        beam_size, alpha, max_decoding_length, timeout = self._options(served, beam_size, max_decoding_length,
                                                                       length_penalty, timeout_ms)
        if n_best is not None:
            beam_size = max(beam_size, n_best)
        t = served.translator
        keep = [i for i, text in enumerate(texts) if text.strip()]
        if not keep:
            done = asyncio.get_running_loop().create_future()
            done.set_result([""] * len(texts) if n_best is None else [[""] for _ in texts])
            return done
        sources = [list(ids) + [t.end_id] for ids in t.encode([texts[i] for i in keep], [i + 1 for i in keep])]
        finish = _translations if n_best is None else _hypotheses
        return _Outcome(self, len(keep), finish, t, keep, len(texts)).start(
            lambda k, outcome: self._submit(
                served, sources[k], self._translation_options(served, sources[k], beam_size, alpha,
                                                              max_decoding_length, n_best or 1), timeout, outcome, k))

    def hypotheses(self, texts, n_best, model=None, precision=None, beam_size=None, max_decoding_length=None,
                   length_penalty=None, timeout_ms=None):
        """translate(), with each text's `n_best` best translations, best first (a list a text), as the beam search
        of that text alone with n_best gives them (``decode.beam_search``, or ``decode.hf_beam_search`` for a
        pretrained Marian model). The beam is at least n_best wide."""
        return self._translate(texts, model, precision, beam_size, max_decoding_length, length_penalty, timeout_ms,
                               _check_int(n_best, "n_best", 1))

    async def stream(self, text, model=None, precision=None, max_decoding_length=None, timeout_ms=None):
        """Greedy translation of one text, as pieces of text while it is decoded: each piece ends where a word does
        (the last one at the end), and the pieces join to ``translate([text], beam_size=1)``. Closing the iterator
        (or cancelling the task that reads it) frees the request's row."""
        if not isinstance(text, str):
            raise ValueError("text must be a str")
        served = self.model(model, precision)
        _, _, max_decoding_length, timeout = self._options(served, 1, max_decoding_length, None, timeout_ms)
        t = served.translator
        if not text.strip():
            return
        source = list(t.encode([text])[0]) + [t.end_id]
        events = asyncio.Queue()
        rid = self._submit(served, source, self._translation_options(served, source, 1, t.alpha, max_decoding_length),
                           timeout, _into(events), tokens=True)
        ids, sent, finished, cut = [], "", False, False
        try:
            while True:
                event = await events.get()
                kind = event.kind
                if kind == "token":
                    token = event.token
                    # The translation ends at the first end or pad id, as Translator cuts it: later tokens are not
                    # part of it (the engine decodes on to its own end).
                    cut = cut or token in (t.end_id, t.pad_id)
                    if cut:
                        continue
                    ids.append(token)
                    stable = _stable_text(_decode(t, [ids])[0])
                    if len(stable) > len(sent) and stable.startswith(sent):
                        yield stable[len(sent):]
                        sent = stable
                elif kind == "finished":
                    finished = True
                    full = _decode(t, [_cut(event.ids, t)])[0]
                    if full.startswith(sent) and len(full) > len(sent):
                        yield full[len(sent):]
                    return
                else:
                    raise _failure(kind, event.message)
        finally:
            self._release(rid, finished)

    # -- generation ------------------------------------------------------------------------------------------------
    def _completion(self, prompt, model, precision, sampling, options, timeout_ms):
        """The checked prompt: (served model, its ids, its Sampling, submit(index, deliver) sending it to the
        engine). The options come as a Sampling already made (the server's edge makes it once) or as its
        keywords."""
        if not isinstance(prompt, str) or not prompt:
            raise ValueError("prompt must be a non-empty str")
        served = self.model(model, precision, kind="generator")
        if sampling is None:
            sampling = Sampling(**options)
        elif not isinstance(sampling, Sampling) or options:
            raise TypeError("sampling must be a Sampling, given without its keywords")
        timeout = _timeout(timeout_ms)
        ids = list(served.tokenizer.encode(prompt))
        if not ids:
            raise ValueError("prompt must hold at least one token")
        seed = sampling.seed if sampling.seed is not None else int.from_bytes(os.urandom(8), "little") >> 1
        sequence = _core.serve.SequenceOptions(
            max_len=len(ids) + sampling.max_tokens, temperature=sampling.temperature, top_k=sampling.top_k,
            top_p=sampling.top_p, seed=seed, logit_bias=sampling.logit_bias or None,
            presence_penalty=sampling.presence_penalty, frequency_penalty=sampling.frequency_penalty,
            logprobs=sampling.logprobs is not None, top_logprobs=sampling.logprobs or 0)

        def submit(index, deliver, tokens=False):
            return self._submit(served, ids, sequence, timeout, deliver, index, tokens=tokens)

        return served, ids, sampling, submit

    async def complete(self, prompt, model=None, precision=None, timeout_ms=None, sampling=None, **options):
        """A GPT's continuation of `prompt`, as ``decode.generate`` makes it alone (temperature 0: the first maximum
        each step; else sampled among the top_k ids and the top_p nucleus, from a generator seeded with `seed`);
        options: Sampling's fields (max_tokens, temperature, top_k, top_p, seed, stop, logit_bias, presence_penalty,
        frequency_penalty, logprobs), or `sampling`, a Sampling made of them. stop: the text ends before the first
        stop string to appear, and the decoding stops there. Returns a Completion."""
        pieces, tokens = [], []
        served, ids, sampling, submit = self._completion(prompt, model, precision, sampling, options, timeout_ms)
        if sampling.stop or sampling.logprobs is not None:   # the tokens are watched as they come
            ended = {}
            async for piece in self._pieces(served, ids, sampling, submit, ended):
                pieces.append(piece.text)
                tokens.extend(piece.tokens or ())
                reason = piece.finish_reason
            return Completion("".join(pieces), reason, ended["prompt_tokens"], ended["completion_tokens"],
                              tokens if sampling.logprobs is not None else None)
        made = await _Outcome(self, 1, _first).start(submit)
        return Completion(served.tokenizer.decode(made), "length" if len(made) == sampling.max_tokens else "stop",
                          len(ids), len(made))

    def stream_completion(self, prompt, model=None, precision=None, timeout_ms=None, counts=None, sampling=None,
                          **options):
        """complete() as it is made, as Piece objects: (text, None, tokens) as tokens come (a piece never ends
        inside a character the tokenizer has not finished, nor sends a part of a stop string before it is known not
        to be one), then ("", finish_reason, ()). tokens: the Tokens that came since the last piece (logprobs asked
        for; else None). Closing the iterator frees the request's row. counts: a dict that gets prompt_tokens and
        completion_tokens at the end."""
        served, ids, sampling, submit = self._completion(prompt, model, precision, sampling, options, timeout_ms)
        return self._pieces(served, ids, sampling, submit, {} if counts is None else counts)

    async def _pieces(self, served, ids, sampling, submit, ended):
        """stream_completion's pieces; `ended` gets the prompt's and the completion's token counts at the end."""
        events = asyncio.Queue()
        rid = submit(0, _into(events), tokens=True)
        decode, stops, want = served.tokenizer.decode, sampling.stop, sampling.logprobs is not None
        made, sent, finished, stopped, tokens, text = [], "", False, False, [], ""
        try:
            while True:
                event = await events.get()
                kind = event.kind
                if kind == "token":
                    offset = len(text.rstrip("\ufffd"))   # where this token's text starts
                    made.append(event.token)
                    text = decode(made)
                    if want:
                        tokens.append(Token(decode([event.token]), event.logprob,
                                            tuple((decode([i]), lp) for i, lp in event.top_logprobs), offset))
                    if text.endswith("\ufffd") or not text.startswith(sent):
                        continue
                    cut = stop_at(text, stops)
                    if cut is not None:   # the rest is not wanted: the request ends here (its row freed below)
                        stopped = True
                        if cut > len(sent):
                            yield Piece(text[len(sent):cut], None, _before(tokens, cut) if want else None)
                        ended.update(prompt_tokens=len(ids), completion_tokens=len(made))
                        yield Piece("", "stop", () if want else None)
                        return
                    safe = len(text) - held_back(text, stops)
                    if safe > len(sent):
                        yield Piece(text[len(sent):safe], None, _before(tokens, safe) if want else None)
                        tokens = [t for t in tokens if t.offset >= safe]
                        sent = text[:safe]
                elif kind == "finished":
                    finished = True
                    final = event.ids
                    text = decode(final)
                    reason = "length" if len(final) == sampling.max_tokens else "stop"
                    cut = stop_at(text, stops)
                    if cut is not None:
                        text, reason = text[:cut], "stop"
                    if text.startswith(sent) and len(text) > len(sent):
                        yield Piece(text[len(sent):], None, _before(tokens, len(text)) if want else None)
                    ended.update(prompt_tokens=len(ids), completion_tokens=len(final))
                    yield Piece("", reason, () if want else None)
                    return
                else:
                    raise _failure(kind, event.message)
        finally:
            self._release(rid, finished, stopped)

    # -- state -----------------------------------------------------------------------------------------------------
    def stats(self):
        """The engine's counters: queue_depth, rows_in_use, requests_total, tokens_total, steps_total,
        step_seconds_total, rejected_total, cancelled_total, timed_out_total (and a few more)."""
        s = dict(self._engine.stats())
        s["requests_total"] = self._counts["requests_total"]
        s["rejected_total"] = self._counts["rejected_total"]
        s["timed_out_total"] += self._counts["timed_out_total"]
        s["in_flight"] = len(self._waiting)
        return s

    @property
    def draining(self):
        return self._draining

    def start_draining(self):
        """Take no new request (EngineClosed); those accepted go on."""
        self._draining = True

    async def drain(self, timeout):
        """Wait until every accepted request has its answer, at most `timeout` seconds; True if all did."""
        self.start_draining()
        deadline = time.monotonic() + timeout
        while len(self._waiting):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    def close(self):
        """Stop the engine (requests not finished are cancelled) and its poller."""
        _open_engines.discard(self)
        self._draining = True
        self._closed.set()
        self._engine.stop()
        self._poller.join(timeout=5)

    def _poll(self):
        while not self._closed.is_set():
            events = self._engine.poll(0.05)
            if not events:
                continue
            # One call into each waiting loop for all of its events (each call wakes the loop: a write to its pipe).
            batches = {}
            with self._lock:
                for event in events:
                    request = self._waiting.get(event.request)
                    if request is not None:
                        if event.kind != "token":   # the request's last event: no one waits for more
                            del self._waiting[event.request]
                        batches.setdefault(request.loop, []).append((request, event))
            for loop, batch in batches.items():
                try:
                    loop.call_soon_threadsafe(_deliver, batch)
                except RuntimeError:   # its loop has closed: no one waits any more
                    for _, event in batch:
                        with self._lock:
                            self._waiting.pop(event.request, None)
                        if event.kind == "token":
                            self._engine.cancel(event.request)


# Engines still open when the interpreter exits are stopped first: their C++ thread must not outlive it.
_open_engines = weakref.WeakSet()


@atexit.register
def _close_open_engines():
    for engine in list(_open_engines):
        engine.close()


def _arguments_tokenizer(tokenizer):
    for method in ("encode", "decode"):
        if not callable(getattr(tokenizer, method, None)):
            raise TypeError(f"AsyncEngine.add_generator: tokenizer must have encode() and decode(), got "
                            f"{type(tokenizer).__name__}")


def stop_strings(stop):
    """A request's stop strings as a tuple (empty for none): None, a non-empty str, or a list of 1 to 4 of them, as
    OpenAI takes them. ValueError naming stop."""
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, (list, tuple)) or not 1 <= len(stops) <= 4 or \
            not all(isinstance(s, str) and s for s in stops):
        raise ValueError("stop must be a non-empty string or a list of 1 to 4 of them")
    return tuple(stops)


def _before(tokens, end):
    """The Tokens whose text starts before character `end`."""
    return tuple(t for t in tokens if t.offset < end)


def _logit_bias(bias):
    """{token id: bias} with int ids and finite biases in [-100, 100]; OpenAI's JSON sends the ids as strings."""
    if bias is None:
        return {}
    if not isinstance(bias, dict):
        raise ValueError(f"logit_bias must be an object of token ids to biases, got {type(bias).__name__}")
    out = {}
    for key, value in bias.items():
        try:
            token = int(key) if isinstance(key, str) else key
        except ValueError:
            token = None
        if isinstance(token, bool) or not isinstance(token, int) or token < 0:
            raise ValueError(f"logit_bias: {key!r} is not a token id")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not -100 <= value <= 100:
            raise ValueError(f"logit_bias: the bias of token {token} must be a number from -100 to 100, got {value!r}")
        out[token] = float(value)
    return out


def _penalty(value, name):
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or \
            not -2 <= value <= 2:
        raise ValueError(f"{name} must be a number from -2 to 2, got {value!r}")
    return float(value)


def stop_at(text, stops):
    """Where `text` is cut for the first stop string in it (the earliest start), or None."""
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(found) if found else None


def held_back(text, stops):
    """How many characters at the end of `text` may be the start of a stop string, and so are not sent yet."""
    longest = 0
    for s in stops:
        for n in range(min(len(s) - 1, len(text)), longest, -1):
            if text.endswith(s[:n]):
                longest = n
                break
    return longest


def _failure(kind, message):
    if kind == "timed_out":
        return TimeoutError("the request timed out (timeout_ms)")
    if kind == "cancelled":
        return EngineClosed(f"the request was cancelled: {message}")
    return RuntimeError(f"the engine failed the request: {message}")


def _translations(ends, translator, keep, count):
    """The texts of a translate() call: each kept text's finished ids cut and decoded, "" for the blank ones."""
    out = [""] * count
    for i, text in zip(keep, _decode(translator, [_cut(end.ids, translator) for end in ends])):
        out[i] = text
    return out


def _hypotheses(ends, translator, keep, count):
    """The texts of a hypotheses() call: each kept text's n best, cut and decoded; [""] for the blank ones."""
    out = [[""] for _ in range(count)]
    for i, end in zip(keep, ends):
        out[i] = _decode(translator, [_cut(ids, translator) for ids in [end.ids, *end.alternatives]])
    return out


def _first(ends):
    """A completion's ids."""
    return list(ends[0].ids)


def _cut(ids, translator):
    """A finished sequence's ids up to its first end or pad id, as Translator.translate_ids cuts them."""
    out = []
    for i in ids:
        if i in (translator.end_id, translator.pad_id):
            break
        out.append(int(i))
    return out


def _decode(translator, id_lists):
    vocab = translator.vocab
    return vocab.decode(id_lists) if translator.marian else [vocab.decode(ids) for ids in id_lists]


def _stable_text(text):
    """The part of a translation in progress that later tokens cannot change: up to its last space (the last word
    may still grow, and the space before it may still go, as before punctuation)."""
    cut = text.rfind(" ")
    return text[:cut] if cut > 0 else ""


def _translator_like(translator, model):
    """A Translator with `translator`'s vocabulary and options over another model (a quantised copy)."""
    other = type(translator).__new__(type(translator))
    other.__dict__.update(translator.__dict__)
    other.model = model
    return other

