"""POST /v1/translate: ctransformer's own translation endpoint (JSON; one text streamed as server-sent events)."""
import time

from starlette.responses import JSONResponse

from ctransformer.serve.http_io import EventStream, HTTPError, close_quietly, parse_json, read_body, \
    translation_events
from ctransformer.serve.protocol import TranslateRequest
from ctransformer.serve.server import refusal


async def translate(server, request):
    start = time.perf_counter()
    limits, engine = server.limits, server.engine
    data = parse_json(await read_body(request, limits.max_body_bytes, limits.body_timeout))
    server.check_key(request, data.get("api_key"))
    req = TranslateRequest.parse(data, limits)
    options = req.options
    served = server.model(options.model, options.precision)
    if not req.stream:
        translations = await server.unless_disconnected(request, engine.translate, req.texts,
                                                        **options.engine_options())
        server.observe("/v1/translate", start, time.perf_counter())
        return JSONResponse({"translations": translations})
    # One text per stream: the events of several would interleave or wait on each other; a client streams several
    # texts with one request each, which the engine batches anyway.
    if len(req.texts) != 1:
        raise HTTPError(400, f"texts: a stream takes exactly one text, got {len(req.texts)} "
                             f"(send one request per text)")
    beam_size = options.beam_size if options.beam_size is not None else served.translator.beam_size
    if beam_size > 1:   # a beam's words are not final until the search ends: one event with the result
        translation = (await server.unless_disconnected(request, engine.translate, req.texts,
                                                        **options.engine_options()))[0]
        server.observe("/v1/translate", start, time.perf_counter())
        return EventStream(translation_events([], None, translation), None)
    try:
        pieces = engine.stream(req.texts[0], model=options.model, precision=options.precision,
                               max_decoding_length=options.max_decoding_length, timeout_ms=options.timeout_ms)
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
        piece = await server.unless_disconnected(request, first)
    except BaseException:
        await close_quietly(pieces)
        raise
    server.metrics.first_token.observe(time.perf_counter() - start)

    def done():
        server.observe("/v1/translate", start, time.perf_counter())

    return EventStream(translation_events([] if piece is None else [piece], pieces, None, done), pieces)
