"""OpenAI's API, so its SDKs and the clients built on them work unchanged: POST /v1/completions and POST
/v1/chat/completions for a GPT (its continuations, whole or streamed, cut at stop strings, with logprobs, logit_bias
and the penalties), a chat for a translator (the last user message translated), and GET /v1/models."""
import asyncio
import time
import uuid

from starlette.responses import JSONResponse

from ctransformer.serve import chat_template
from ctransformer.serve.engine import Completion, UnknownModel
from ctransformer.serve.http_io import EventStream, HTTPError, close_quietly, parse_json, read_body
from ctransformer.serve.protocol import ChatRequest, CompletionRequest
from ctransformer.serve.server import languages_of

# How the plain template (chat_prompt) names a chat's roles.
ROLE_NAMES = {"system": "System", "user": "User", "assistant": "Assistant"}


async def list_models(server, request):
    data = []
    for m in server.engine.models:
        entry = {"id": m.name, "object": "model", "owned_by": "ctransformer", "kind": m.kind, "precision": m.precision}
        if m.kind == "translator":
            src, tgt = languages_of(m)
            entry.update(source_language=src, target_language=tgt, beam_size=m.translator.beam_size)
        else:
            entry.update(max_seq_len=m.max_seq_len)
        data.append(entry)
    return JSONResponse({"object": "list", "data": data})


async def completions(server, request):
    """OpenAI's legacy completions for a GPT (protocol.CompletionRequest); answers its text_completion shape."""
    start = time.perf_counter()
    limits = server.limits
    data = parse_json(await read_body(request, limits.max_body_bytes, limits.body_timeout))
    server.check_key(request, data.get("api_key"))
    req = CompletionRequest.parse(data, limits)
    served = server.model(req.model, req.precision, kind="generator")
    return await generated(server, request, req, start, served, req.prompts, "/v1/completions")


async def chat_completions(server, request):
    """OpenAI's chat completions (protocol.ChatRequest). A GPT continues the conversation made a prompt (its own
    chat template, else chat_prompt); a translator translates the last user message, so any chat client can use a
    translator."""
    start = time.perf_counter()
    limits = server.limits
    data = parse_json(await read_body(request, limits.max_body_bytes, limits.body_timeout))
    server.check_key(request, data.get("api_key"))
    req = ChatRequest.parse(data, limits)
    try:
        served = server.engine.model(req.model, req.precision, kind="generator")
    except UnknownModel:
        served = server.model(req.model, req.precision, kind="translator")
    if served.kind != "generator":
        return await translated_chat(server, request, req, start, served)
    template = getattr(served.tokenizer, "chat_template", None)
    if template is None:
        prompt = chat_prompt(req.messages)
    else:   # the model's own (tokenizer_config.json), as transformers' apply_chat_template renders it
        try:
            prompt = chat_template.render(template, [{"role": r, "content": t} for r, t in req.messages],
                                          served.tokenizer.bos_token, served.tokenizer.eos_token)
        except chat_template.TemplateRefusal as error:
            raise HTTPError(400, f"messages: {error}") from None
    return await generated(server, request, req, start, served, [prompt], "/v1/chat/completions")


async def generated(server, request, req, start, served, prompts, endpoint):
    """A GPT's answer to a completion or a chat: each prompt continued (or streamed, one prompt), in the endpoint's
    shape."""
    chat = endpoint == "/v1/chat/completions"
    engine, sampling = server.engine, req.sampling
    outside = [token for token in sampling.logit_bias if token >= served.vocab_size]
    if outside:
        raise HTTPError(400, f"logit_bias: token id {outside[0]} is outside the vocabulary [0, {served.vocab_size})")
    call = dict(model=served.name, precision=served.precision, timeout_ms=req.timeout_ms)
    shape = ChatShape(served.name) if chat else CompletionShape(served.name)
    n, echo = req.n, getattr(req, "echo", False)
    if not req.stream:
        # n choices a prompt, prompt by prompt; choice i of a request with a seed samples from seed + i
        choices = [sampling if sampling.seed is None else sampling.seeded(seed_plus(sampling.seed, i))
                   for i in range(n)]
        try:
            done = await server.unless_disconnected(request, lambda: asyncio.gather(
                *(engine.complete(p, sampling=choice, **call) for p in prompts for choice in choices)))
        except ValueError as error:   # the tokenizer's or an option's refusal, named
            raise HTTPError(400, f"{'messages' if chat else 'prompt'}: {error}") from None
        if echo:
            done = [d._replace(text=p + d.text) for p, d in zip((p for p in prompts for _ in choices), done)]
        server.observe(endpoint, start, time.perf_counter())
        answer = shape.whole(done)
        answer["usage"]["prompt_tokens"] = sum(d.prompt_tokens for d in done[::n])   # a prompt counts once
        answer["usage"]["total_tokens"] = answer["usage"]["prompt_tokens"] + answer["usage"]["completion_tokens"]
        return JSONResponse(answer)
    if len(prompts) * n > 1:
        return await streamed_choices(server, request, req, start, prompts, call, shape, endpoint)
    counts = {}   # the prompt's and the completion's tokens, at the end
    try:
        pieces = engine.stream_completion(prompts[0], counts=counts, sampling=sampling, **call)

        async def first_piece():
            return await pieces.__anext__()

        first = await server.unless_disconnected(request, first_piece)
    except ValueError as error:
        await close_quietly(locals().get("pieces"))
        raise HTTPError(400, f"{'messages' if chat else 'prompt'}: {error}") from None
    except BaseException:
        await close_quietly(locals().get("pieces"))
        raise
    server.metrics.first_token.observe(time.perf_counter() - start)

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
        if req.include_usage:
            yield shape.usage([Completion("", "", counts["prompt_tokens"], counts["completion_tokens"])])
        server.observe(endpoint, start, time.perf_counter())
        yield "[DONE]"

    return EventStream(events(), pieces)


async def streamed_choices(server, request, req, start, prompts, call, shape, endpoint):
    """A stream of several choices (n a prompt, prompt by prompt; choice i of a prompt samples from seed + i), their
    chunks interleaved as their pieces come, each carrying its choice's index, as OpenAI's streams do."""
    n, engine, sampling = req.n, server.engine, req.sampling
    streams, counts = [], []
    for p in prompts:
        for i in range(n):
            counts.append({})
            choice = sampling if sampling.seed is None else sampling.seeded(seed_plus(sampling.seed, i))
            streams.append(engine.stream_completion(p, counts=counts[-1], sampling=choice, **call))
    choices = _Choices(streams)
    try:   # every choice's first piece before the answer's headers, so a refusal still gets its status
        firsts = await server.unless_disconnected(request, lambda: asyncio.gather(*(s.__anext__() for s in streams)))
    except ValueError as error:
        await choices.aclose()
        raise HTTPError(400, f"{'messages' if endpoint.endswith('chat/completions') else 'prompt'}: {error}") \
            from None
    except BaseException:
        await choices.aclose()
        raise
    server.metrics.first_token.observe(time.perf_counter() - start)

    async def events():
        for index in range(len(streams)):
            begin = shape.begin(index)
            if begin is not None:
                yield begin
            if getattr(req, "echo", False):
                yield shape.piece(prompts[index // n], index=index)
        async for index, piece in choices.pieces(firsts):
            if piece.text:
                yield shape.piece(piece.text, piece.tokens, index)
            if piece.finish_reason is not None:
                yield shape.end(piece.finish_reason, index)
        if req.include_usage:   # each prompt counted once
            done = [Completion("", "", c["prompt_tokens"], c["completion_tokens"]) for c in counts]
            usage = shape.usage(done)
            usage["usage"]["prompt_tokens"] = sum(d.prompt_tokens for d in done[::n])
            usage["usage"]["total_tokens"] = usage["usage"]["prompt_tokens"] + usage["usage"]["completion_tokens"]
            yield usage
        server.observe(endpoint, start, time.perf_counter())
        yield "[DONE]"

    return EventStream(events(), choices)


class _Choices:
    """Several choices' piece iterators, read at once: pieces() gives (index, piece) as each comes; aclose() stops
    them all (the client went away, or a choice failed), which frees their rows."""

    def __init__(self, streams):
        self.streams, self.tasks = streams, []

    async def pieces(self, firsts):
        queue = asyncio.Queue()

        async def pump(index, stream, piece):
            try:
                while True:
                    queue.put_nowait((index, piece, None))
                    if piece.finish_reason is not None:
                        return
                    piece = await stream.__anext__()
            except Exception as error:  # noqa: BLE001 - handed to the reader, which raises it
                queue.put_nowait((index, None, error))

        self.tasks = [asyncio.ensure_future(pump(i, s, f)) for i, (s, f) in enumerate(zip(self.streams, firsts))]
        left = len(self.streams)
        while left:
            index, piece, error = await queue.get()
            if error is not None:
                raise error
            if piece.finish_reason is not None:
                left -= 1
            yield index, piece

    async def aclose(self):
        for task in self.tasks:
            task.cancel()
        for stream in self.streams:
            await close_quietly(stream)


async def translated_chat(server, request, req, start, served):
    """A translator in a chat: the last user message translated, with the model's own options."""
    if req.given:
        raise HTTPError(400, f"{req.given[0]}: a translator ({served.name}) takes no sampling options; it translates "
                             "the last user message")
    users = [text for role, text in req.messages if role == "user"]
    if not users:
        raise HTTPError(400, "messages: a translator translates the last user message, and there is none")
    (translation,) = await server.unless_disconnected(request, server.engine.translate, [users[-1]],
                                                      model=served.name, precision=served.precision)
    server.observe("/v1/chat/completions", start, time.perf_counter())
    shape = ChatShape(served.name)
    if not req.stream:
        return JSONResponse(shape.whole([_Translated(translation)]))

    async def events():
        yield shape.begin()
        if translation:
            yield shape.piece(translation)
        yield shape.end("stop")
        if req.include_usage:
            yield shape.usage([_Translated(translation)])
        yield "[DONE]"

    return EventStream(events(), None)


def seed_plus(seed, i):
    """seed + i, wrapped into [-2**63, 2**63) as a seed must be."""
    return (seed + i + 2**63) % 2**64 - 2**63


def chat_prompt(messages):
    """A GPT's prompt of a chat that has no template of its own: each message a line "Role: text" (System, User,
    Assistant), then "Assistant:", which the model continues. [(role, text)] as protocol.messages_of gives them
    (roles system, user, assistant)."""
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


class CompletionShape:
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

    def begin(self, index=0):
        return None

    def piece(self, text, tokens=None, index=0):
        return self._answer([self._choice(text, index, None, tokens)])

    def end(self, reason, index=0):
        return self._answer([self._choice("", index, reason)])

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


class ChatShape:
    """OpenAI's chat.completion answer, or its chat.completion.chunk stream: the role first, then content deltas,
    then the finish reason in an empty delta."""

    def __init__(self, model):
        self.model, self.id, self.created = model, f"chatcmpl-{uuid.uuid4().hex}", int(time.time())

    def _chunk(self, choices, **extra):
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": choices, **extra}

    @staticmethod
    def _delta(delta, finish_reason=None, tokens=None, index=0):
        return {"index": index, "delta": delta, "logprobs": _chat_logprobs(tokens), "finish_reason": finish_reason}

    def whole(self, done):
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": i, "message": {"role": "assistant", "content": d.text},
                             "logprobs": _chat_logprobs(d.tokens), "finish_reason": d.finish_reason}
                            for i, d in enumerate(done)],
                "usage": _usage(done)}

    def begin(self, index=0):
        return self._chunk([self._delta({"role": "assistant", "content": ""}, index=index)])

    def piece(self, text, tokens=None, index=0):
        return self._chunk([self._delta({"content": text}, None, tokens, index)])

    def end(self, reason, index=0):
        return self._chunk([self._delta({}, reason, index=index)])

    def usage(self, done):
        return self._chunk([], usage=_usage(done))
