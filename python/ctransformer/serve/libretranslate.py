"""LibreTranslate's API, so its clients and web front end work unchanged: POST /translate (text or HTML, with the
beam's alternatives), POST /translate_file (.txt and .html files) with GET /download_file/..., GET /languages and
GET /frontend/settings. A request goes to the model that translates its source language to its target."""
import pathlib
import time
import urllib.parse
import uuid

from starlette.responses import JSONResponse, Response

from ctransformer.serve import html_text
from ctransformer.serve.http_io import HTTPError, as_text, describe, is_form, parse_form, parse_json, read_body
from ctransformer.serve.protocol import LibreTranslateRequest, languages
from ctransformer.serve.server import languages_of

# LibreTranslate's /languages names each code; the codes of a model without an entry here show as the code.
LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek", "en": "English", "es": "Spanish",
    "fi": "Finnish", "fr": "French", "hi": "Hindi", "hu": "Hungarian", "it": "Italian", "ja": "Japanese",
    "ko": "Korean", "nl": "Dutch", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian",
    "sv": "Swedish", "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}
# /translate_file's formats (by the file name's suffix) and their media types; the translated files kept.
FILE_FORMATS = {".txt": "text/plain; charset=utf-8", ".html": "text/html; charset=utf-8",
                ".htm": "text/html; charset=utf-8"}
FILES_KEPT = 64


async def translate(server, request):
    start = time.perf_counter()
    limits, engine = server.limits, server.engine
    body = await read_body(request, limits.max_body_bytes, limits.body_timeout)
    content_type = request.headers.get("content-type", "").lower()
    data = parse_form(body, content_type) if is_form(content_type) else parse_json(body)
    server.check_key(request, data.get("api_key"))
    req = LibreTranslateRequest.parse(data, limits)
    served = pick_model(server, req.source, req.target)
    single = isinstance(req.q, str)
    answer = {}
    if req.format == "html":   # the text between the tags is translated, the markup kept as it came
        translations = [await translated_html(server, request, served, text, "q") for text in req.texts]
    elif req.alternatives:   # the beam's n best: the first is the translation, the rest its alternatives
        best = await server.unless_disconnected(request, engine.hypotheses, req.texts, req.alternatives + 1,
                                                model=served.name, precision=served.precision)
        translations, others = [b[0] for b in best], [b[1:] for b in best]
        answer["alternatives"] = others[0] if single else others
    else:
        translations = await server.unless_disconnected(request, engine.translate, req.texts, model=served.name,
                                                        precision=served.precision)
    server.observe("/translate", start, time.perf_counter())
    return JSONResponse({"translatedText": translations[0] if single else translations, **answer})


async def translated_html(server, request, served, page, field, limit=None):
    """An HTML document with the text between its tags translated and its markup kept as it came."""
    pieces = html_text.split(page)
    words = html_text.texts(pieces)
    sent = [w for w in words if w]
    limit = server.limits.max_texts if limit is None else limit
    if len(sent) > limit:
        raise HTTPError(413, f"{field}: the HTML holds {len(sent)} texts between its tags, more than the limit of "
                             f"{limit}")
    done = iter(await server.unless_disconnected(request, server.engine.translate, sent, model=served.name,
                                                 precision=served.precision))
    return html_text.join(pieces, [next(done) if w else None for w in words])


async def translate_file(server, request):
    """A multipart body with `file` (.txt: each line translated, blank lines kept; .html/.htm: as format html),
    `source`, `target` (and api_key). Answers {"translatedFileUrl"}, where GET fetches the translated file (kept in
    memory, the last FILES_KEPT of them)."""
    start = time.perf_counter()
    limits = server.limits
    body = await read_body(request, limits.max_body_bytes, limits.body_timeout)
    content_type = request.headers.get("content-type", "").lower()
    if not content_type.startswith("multipart/form-data"):
        raise HTTPError(400, "file: expected a multipart/form-data body with the file (as LibreTranslate takes it)")
    files = {}
    data = parse_form(body, content_type, files)
    server.check_key(request, data.get("api_key"))
    if "file" not in files:
        raise HTTPError(400, "file: required (a .txt or .html file part)")
    filename, payload = files["file"]
    name = pathlib.PurePosixPath(filename.replace("\\", "/")).name or "file"
    suffix = pathlib.PurePosixPath(name).suffix.lower()
    if suffix not in FILE_FORMATS:
        raise HTTPError(400, f"file: expected one of {', '.join(FILE_FORMATS)}, got {describe(name)}")
    text = as_text(payload)
    served = pick_model(server, *languages(data))
    if suffix == ".txt":   # line by line, each line's ending kept
        lines = text.splitlines(keepends=True)
        bodies = [line.rstrip("\r\n") for line in lines]
        sent = [b for b in bodies if b.strip()]
        if any(len(b) > limits.max_text_chars for b in sent):
            raise HTTPError(413, f"file: a line holds more than the limit of {limits.max_text_chars} characters")
        done = []
        for i in range(0, len(sent), limits.max_texts):   # the engine's limit of one request, a batch at a time
            done += await server.unless_disconnected(request, server.engine.translate, sent[i:i + limits.max_texts],
                                                     model=served.name, precision=served.precision)
        done = iter(done)
        out = "".join((next(done) if b.strip() else b) + line[len(b):] for b, line in zip(bodies, lines))
    else:
        out = await translated_html(server, request, served, text, "file", limit=limits.max_texts * 16)
    key = uuid.uuid4().hex
    server.translated_files[key] = (name, out.encode("utf-8"), FILE_FORMATS[suffix])
    while len(server.translated_files) > FILES_KEPT:
        server.translated_files.pop(next(iter(server.translated_files)))
    server.observe("/translate", start, time.perf_counter())
    base = str(request.base_url).rstrip("/")
    return JSONResponse({"translatedFileUrl": f"{base}/download_file/{key}/{urllib.parse.quote(name)}"})


async def download_file(server, request):
    """GET /download_file/KEY/NAME: a file /translate_file made."""
    _, _, key, *_ = request.url.path.split("/") + [""]
    found = server.translated_files.get(key)
    if found is None:
        raise HTTPError(404, "file: not found (translated files are kept for a while only)")
    name, content, media_type = found
    return Response(content, media_type=media_type, headers={
        "Content-Disposition": f"attachment; filename*=UTF-8''{urllib.parse.quote(name)}"})


def pick_model(server, source, target):
    """The model that translates source to target, when models declare their languages (as LibreTranslate routes: a
    pair nobody serves is a 400); else the first. source "auto" is taken when one source language is served
    (nothing is detected)."""
    models = [m for m in server.engine.models if m.kind == "translator"]
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
            raise HTTPError(400, f"source: 'auto' needs one source language served, and this server translates from "
                                 f"{', '.join(sources)}: name it (languages are not detected)")
        source = sources[0]
    for m in declared:
        if languages_of(m) == (source, target):
            return m
    raise HTTPError(400, f"source, target: no loaded model translates {source!r} to {target!r} "
                         f"(GET /languages lists the pairs)")


async def list_languages(server, request):
    pairs = {}
    for m in server.engine.models:
        src, tgt = languages_of(m) if m.kind == "translator" else (None, None)
        if src is not None and tgt is not None:
            pairs.setdefault(src, set()).add(tgt)
    return JSONResponse([{"code": src, "name": LANGUAGE_NAMES.get(src, src), "targets": sorted(pairs[src])}
                         for src in sorted(pairs)])


async def frontend_settings(server, request):
    """LibreTranslate's settings for its web front end: the limits, whether a key is needed, the file formats, and
    the languages its menus start at (auto, when several sources are served)."""
    pairs = sorted({languages_of(m) for m in server.engine.models if m.kind == "translator"} - {(None, None)})
    sources = sorted({src for src, _ in pairs})
    source = sources[0] if len(sources) == 1 else "auto"
    target = pairs[0][1] if pairs else "en"
    keyed = server.limits.api_key is not None

    def named(code):
        return {"code": code, "name": "Auto Detect" if code == "auto" else LANGUAGE_NAMES.get(code, code)}

    return JSONResponse({"charLimit": server.limits.max_text_chars, "frontendTimeout": 500, "apiKeys": keyed,
                         "keyRequired": keyed, "suggestions": False, "filesTranslation": True,
                         "supportedFilesFormat": list(FILE_FORMATS),
                         "language": {"source": named(source), "target": named(target)}})
