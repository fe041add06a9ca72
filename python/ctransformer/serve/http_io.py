"""Reading a request's body and writing answers: the HTTP side that every endpoint shares.

A refusal is an ``HTTPError`` whose message starts with the field at fault; ``error_response`` makes it
``{"error": message}`` (LibreTranslate's shape and ours) or OpenAI's ``{"error": {"message", "type", "param",
"code"}}``. ``EventStream`` sends server-sent events and stops the engine's work when the client goes away."""
import asyncio
import contextlib
import email.parser
import email.policy
import json
import sys
import urllib.parse

import anyio
from starlette.responses import JSONResponse

from ctransformer.serve.engine import EngineClosed


class HTTPError(Exception):
    """A refusal: its status and the JSON message the client gets."""

    def __init__(self, status, message, headers=None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


class Disconnected(Exception):
    """The client went away while its request waited for the engine (nobody to answer)."""


async def read_body(request, max_bytes, timeout):
    """The request's body: 413 past max_bytes; 408 (and the connection closed) when `timeout` seconds pass between
    two of its parts, as nginx's client_body_timeout, so a client that declares a body and never sends it does not
    hold a connection and a place in the queue."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise HTTPError(413, f"body: {declared} bytes, more than the limit of {max_bytes}")
    # A timer a part, which cancels this task when it fires (a heap entry, where wait_for would make a task a part:
    # the server's Python per request is what limits it under load).
    loop, task, expired = asyncio.get_running_loop(), asyncio.current_task(), []

    def expire():
        expired.append(True)
        task.cancel()

    chunks, size = [], 0
    timer = loop.call_later(timeout, expire)
    try:
        async for chunk in request.stream():
            timer.cancel()
            timer = loop.call_later(timeout, expire)
            size += len(chunk)
            if size > max_bytes:
                raise HTTPError(413, f"body: more than the limit of {max_bytes} bytes")
            chunks.append(chunk)
    except asyncio.CancelledError:
        if not expired:
            raise
        if hasattr(task, "uncancel"):   # Python 3.11+: the cancellation is handled here
            task.uncancel()
        raise HTTPError(408, f"body: {size} bytes came, then nothing for {timeout:g} s", {"Connection": "close"}) \
            from None
    finally:
        timer.cancel()
    return b"".join(chunks)


def as_text(body):
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise HTTPError(400, f"body: not UTF-8 (byte {error.start} is {body[error.start]:#04x})") from None


def parse_json(body):
    """A JSON object's fields; NaN and Infinity (Python's extension, not JSON) refused."""
    def no_constants(name):
        raise ValueError(f"{name} is not a JSON value")

    try:
        data = json.loads(as_text(body), parse_constant=no_constants)
    except (ValueError, RecursionError) as error:   # RecursionError: nesting deeper than the parser's stack
        raise HTTPError(400, f"body: not valid JSON ({str(error)[:200]})") from None
    if not isinstance(data, dict):
        raise HTTPError(400, f"body: expected a JSON object, got {type(data).__name__}")
    return data


def is_form(content_type):
    return content_type.startswith(("application/x-www-form-urlencoded", "multipart/form-data"))


def parse_form(body, content_type, files=None):
    """LibreTranslate's form bodies: url-encoded, or multipart (its web page sends FormData). A field given twice (q)
    becomes a list. files: a dict that gets each multipart file part as name -> (filename, bytes); without it, file
    parts are read as text fields."""
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


def describe(value):
    """A short description of a bad value for an error message (never the whole of a huge one)."""
    text = json.dumps(value, ensure_ascii=True) if isinstance(value, (str, int, float, bool, type(None))) \
        else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def error_response(error, openai=False):
    """The JSON answer of a refusal: {"error": message} (LibreTranslate's shape and ours), or on OpenAI's endpoints
    OpenAI's {"error": {"message", "type", "param", "code"}}, which its SDKs read. The message starts with the field
    at fault, which is the param when it is one of the request's."""
    if not openai:
        return JSONResponse({"error": error.message}, status_code=error.status, headers=error.headers)
    field = error.message.partition(":")[0]
    param = None if field in ("body", "queue", "server", "api_key") or field.startswith("/") or " " in field else field
    kind = ("authentication_error" if error.status in (401, 403) else "rate_limit_error" if error.status == 429
            else "server_error" if error.status >= 500 else "invalid_request_error")
    code = {401: "invalid_api_key", 403: "invalid_api_key", 429: "rate_limit_exceeded", 504: "timeout"}.get(
        error.status, "model_not_found" if error.status == 404 and field == "model" else None)
    return JSONResponse({"error": {"message": error.message, "type": kind, "param": param, "code": code}},
                        status_code=error.status, headers=error.headers)


class EventStream:
    """A server-sent-events answer that watches for the client going away: then it stops and closes the engine's
    iterator at once (uvicorn drops writes to a closed connection silently, so writing alone would not notice)."""

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
                    await close_quietly(self.events)
                    await close_quietly(self.pieces)
            group.cancel_scope.cancel()


async def translation_events(pieces_so_far, pieces, translation, done=None):
    """/v1/translate's stream: a {"text"} per piece, then {"done", "translation"}; a failure after the first piece
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


async def close_quietly(iterator):
    if iterator is not None and hasattr(iterator, "aclose"):
        with contextlib.suppress(Exception):
            await iterator.aclose()
