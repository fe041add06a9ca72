"""GET /openapi.json: an OpenAPI 3.1 description of every endpoint of ``ctransformer-serve``, built from the field
lists the requests are checked against (serve/protocol.py), so the two cannot drift apart (tests/serve/test_openapi.py
checks that each field is described). docs/http-api.md renders it (scripts/openapi_docs.py writes it)."""
from starlette.responses import JSONResponse

from ctransformer import __version__
from ctransformer.serve import protocol

_STR = {"type": "string"}
_TEXTS = {"oneOf": [_STR, {"type": "array", "items": _STR}]}
_PRECISION = {"type": "string", "enum": list(protocol.PRECISIONS)}

# Each request field: its JSON schema and what it does (docs/serve.md says more).
FIELDS = {
    "texts": ({"type": "array", "items": _STR}, "The texts to translate (at most --max-texts)."),
    "q": (_TEXTS, "A text or a list of texts to translate; translatedText has the same shape."),
    "source": (_STR, "The source language's code, or auto when one source language is served."),
    "target": (_STR, "The target language's code."),
    "format": ({"type": "string", "enum": list(protocol.LIBRETRANSLATE_FORMATS)},
               "text, or html: the text between the tags translated, the markup kept."),
    "alternatives": ({"type": "integer", "minimum": 0},
                     "How many of the beam's next best translations to add (text only)."),
    "prompt": (_TEXTS, "A prompt, or a list of prompts (n choices each)."),
    "messages": ({"type": "array", "items": {"type": "object", "properties": {
        "role": {"type": "string", "enum": list(protocol.CHAT_ROLES)},
        "content": {"oneOf": [_STR, {"type": "array", "items": {"type": "object"}}]}},
        "required": ["role", "content"]}},
        "The conversation; a GPT continues it, a translator translates the last user message."),
    "model": (_STR, "The served model's name (GET /v1/models); the first served without one."),
    "precision": (_PRECISION, "The precision the model is served in; the first served without one."),
    "beam_size": ({"type": "integer", "minimum": 1}, "The beam's width (1: greedy); the translator's own by default."),
    "max_decoding_length": ({"type": "integer", "minimum": 1}, "The most target tokens a translation may have."),
    "length_penalty": ({"type": "number", "minimum": 0}, "The beam's length penalty (alpha)."),
    "stream": ({"type": "boolean"}, "Server-sent events: pieces as they are decoded."),
    "timeout_ms": ({"type": "number", "exclusiveMinimum": 0}, "504 past this many milliseconds."),
    "api_key": (_STR, "The server's key, when it has one (or Authorization: Bearer KEY)."),
    "max_tokens": ({"type": "integer", "minimum": 1}, "New tokens at most (16; a chat: up to the server's limit)."),
    "max_completion_tokens": ({"type": "integer", "minimum": 1}, "A chat's newer name for max_tokens."),
    "temperature": ({"type": "number", "minimum": 0, "maximum": 2}, "0: the most likely token; else sampled."),
    "top_p": ({"type": "number", "exclusiveMinimum": 0, "maximum": 1}, "Nucleus sampling."),
    "top_k": ({"type": "integer", "minimum": 0}, "The k most likely tokens only (0: all)."),
    "seed": ({"type": "integer"}, "The request's own generator's seed."),
    "stop": ({"oneOf": [_STR, {"type": "array", "items": _STR, "minItems": 1, "maxItems": 4}]},
             "The text ends before the first of these to appear."),
    "logit_bias": ({"type": "object", "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100}},
                   "{token id: bias} added to the logits before each choice."),
    "presence_penalty": ({"type": "number", "minimum": -2, "maximum": 2},
                         "Subtracted from the logit of each token the completion holds."),
    "frequency_penalty": ({"type": "number", "minimum": -2, "maximum": 2},
                          "Times its count, subtracted from the logit of each token the completion holds."),
    "logprobs": ({"oneOf": [{"type": "integer", "minimum": 0, "maximum": 20}, {"type": "boolean"}]},
                 "Completions: the alternatives listed a token; chat: true for each token's logprob."),
    "top_logprobs": ({"type": "integer", "minimum": 0, "maximum": 20}, "A chat's alternatives listed a token."),
    "echo": ({"type": "boolean"}, "The text starts with the prompt."),
    "stream_options": ({"type": "object", "properties": {"include_usage": {"type": "boolean"}}},
                       "include_usage: a last chunk with the usage."),
    "n": ({"type": "integer", "minimum": 1, "maximum": protocol.MAX_CHOICES}, "Choices a prompt."),
    "user": (_STR, "Taken, not used."),
}
# The fields of each JSON body, and which are required.
BODIES = {
    "/v1/translate": (protocol.V1_FIELDS, ("texts",)),
    "/translate": (("q", "source", "target", "format", "alternatives", "api_key"), ("q",)),
    "/v1/completions": (protocol.COMPLETION_FIELDS, ("prompt",)),
    "/v1/chat/completions": (protocol.CHAT_FIELDS, ("messages",)),
}
# Each route: (method, summary).
ROUTES = {
    "/translate": ("post", "LibreTranslate: translate text or HTML (JSON or a form)."),
    "/translate_file": ("post", "LibreTranslate: translate a .txt or .html file (multipart: file, source, target); "
                                "answers translatedFileUrl."),
    "/download_file/{key}/{name}": ("get", "A file /translate_file translated."),
    "/languages": ("get", "LibreTranslate: the languages served, each with its targets."),
    "/frontend/settings": ("get", "LibreTranslate's web front end: the limits and the first languages."),
    "/v1/translate": ("post", "Translate texts (optionally one streamed as server-sent events)."),
    "/v1/models": ("get", "OpenAI: the models served."),
    "/v1/completions": ("post", "OpenAI's legacy completions for a GPT."),
    "/v1/chat/completions": ("post", "OpenAI's chat completions: a GPT continues the chat, a translator translates "
                                     "the last user message."),
    "/openapi.json": ("get", "This description."),
    "/health": ("get", "The process answers."),
    "/ready": ("get", "The models are loaded and the server is not draining (else 503)."),
    "/metrics": ("get", "Prometheus metrics."),
    "/": ("get", "The web UI."),
}
_ERROR = {"description": "A refusal: {\"error\": message} ({\"error\": {message, type, param, code}} on OpenAI's "
                         "endpoints), the message starting with the field at fault."}


def document():
    """The OpenAPI 3.1 document (a dict)."""
    paths = {}
    for path, (method, summary) in ROUTES.items():
        operation = {"summary": summary, "responses": {"200": {"description": "OK"}}}
        if path in BODIES:
            fields, required = BODIES[path]
            schema = {"type": "object", "required": list(required), "additionalProperties": path == "/translate",
                      "properties": {name: {**FIELDS[name][0], "description": FIELDS[name][1]} for name in fields}}
            operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": schema}}}
            operation["responses"].update({"400": _ERROR, "404": _ERROR, "413": _ERROR, "429": _ERROR,
                                           "503": _ERROR})
        if path.startswith("/download_file/"):
            operation["parameters"] = [{"name": name, "in": "path", "required": True, "schema": _STR}
                                       for name in ("key", "name")]
        paths[path] = {method: operation}
    return {"openapi": "3.1.0",
            "info": {"title": "ctransformer-serve", "version": __version__,
                     "description": "Translation and text generation: LibreTranslate's and OpenAI's APIs, and ours."},
            "paths": paths}


async def schema(server, request):
    return JSONResponse(document())
