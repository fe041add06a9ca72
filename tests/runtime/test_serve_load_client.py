"""benchmarks/serve_load/client.py, the load benchmark's HTTP client, reads every answer the servers give, however the
bytes are cut: a length, chunks (a stream's events, with or without trailers), a body that runs to the connection's
end; and it fails, not hangs, on a dropped connection or a silent server. OpenAI's answers (the GPT runs) give their
text and the server's token count, cut anywhere too. Its open loop records every request, answered or refused, once. (Torch-free: the benchmark's timings rest on this parser, and nothing of its timings is
asserted.)"""
import asyncio
import collections
import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
from serve_load import apis, client  # noqa: E402
from serve_load.client import Closed, Connection, Record, open_loop  # noqa: E402

pytestmark = pytest.mark.threads   # threads, the serving engine or the server: make test-stress runs it under load

BODY = b'{"translations": ["A dog."]}'
LENGTH = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
CHUNKED = (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
           b"6\r\ndata: \r\nf;ext=1\r\n{\"text\": \"a\"}\n\n\r\n0\r\n\r\n")
TRAILERS = CHUNKED[:-2] + b"x-trailer: 1\r\n\r\n"
REFUSED = (b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 13\r\n\r\n"
           b'{"error": ""}')


class Transport:
    def __init__(self):
        self.written, self.closed = [], False

    def write(self, data):
        self.written.append(data)

    def close(self):
        self.closed = True


def answer(raw, cuts, on_chunk=None, closes=False):
    """The answer `post` gives when the server's bytes `raw` arrive cut at each offset in `cuts`."""
    async def run():
        conn = Connection()
        conn.connection_made(Transport())
        future = conn.post("/v1/translate", b"{}", on_chunk, timeout=5.0)
        bounds = [0, *cuts, len(raw)]
        for a, b in zip(bounds, bounds[1:]):
            if b > a:
                conn.data_received(raw[a:b])
        if closes:
            conn.connection_lost(None)
        return await asyncio.wait_for(future, 1.0), conn
    return asyncio.run(run())


@pytest.mark.parametrize("raw", [LENGTH, CHUNKED, TRAILERS, REFUSED], ids=["length", "chunked", "trailers", "429"])
def test_an_answer_cut_anywhere_reads_the_same(raw):
    whole, _ = answer(raw, [])
    for cut in range(1, len(raw)):
        assert answer(raw, [cut])[0] == whole
    assert answer(raw, list(range(1, len(raw))))[0] == whole   # a byte at a time


def test_each_part_of_an_answer():
    (status, headers, data), conn = answer(LENGTH, [5, 40])
    assert (status, headers["content-length"], data) == (200, str(len(BODY)), BODY)
    assert not conn.closed and conn.transport.written[0].startswith(b"POST /v1/translate HTTP/1.1\r\n")
    assert conn.transport.written[0].endswith(b"Content-Length: 2\r\n\r\n{}")
    chunks = []
    (status, _, data), _ = answer(TRAILERS, [60], on_chunk=lambda t, chunk: chunks.append(chunk))
    assert status == 200 and chunks == [b"data: ", b'{"text": "a"}\n\n'] and data == b"".join(chunks)
    (status, _, data), conn = answer(REFUSED, [])
    assert status == 429 and data == b'{"error": ""}' and conn.closed   # "connection: close" is obeyed


def test_a_body_without_length_runs_to_the_end():
    raw = b"HTTP/1.1 200 OK\r\n\r\nthe rest"
    (status, _, data), conn = answer(raw, [3, 20], closes=True)
    assert (status, data, conn.closed) == (200, b"the rest", True)


def test_a_dropped_connection_and_a_silent_server_fail():
    async def run(lost, timeout):
        conn = Connection()
        conn.connection_made(Transport())
        future = conn.post("/v1/translate", b"{}", None, timeout=timeout)
        if lost is not None:
            conn.data_received(lost)
            conn.connection_lost(None)
        try:
            await asyncio.wait_for(future, 2.0)
        except Exception as error:  # noqa: BLE001 - which one is the point
            return type(error), conn.closed
    assert asyncio.run(run(b"", 5.0)) == (Closed, True)   # dropped before a byte: Closed (retried)
    assert asyncio.run(run(LENGTH[:30], 5.0)) == (asyncio.IncompleteReadError, True)
    assert asyncio.run(run(None, 0.05)) == (asyncio.TimeoutError, True)   # its own timer, not the test's


def test_the_open_loop_records_every_request_once():
    """A server on 127.0.0.1 answering 200 and 429 in turn (and dropping its first connection's second request
    unanswered, as a server closing an idle connection does): every request is recorded once, with its status."""
    served, handlers = [], set()

    async def handle(reader, writer):
        handlers.add(asyncio.current_task())
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:   # the client closed it
                return
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            served.append(1)
            if len(served) == 2:
                writer.close()
                return
            writer.write(REFUSED.replace(b"connection: close\r\n", b"") if len(served) % 2 else LENGTH)

    async def run():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            out = await open_loop(port, ["ein Hund"], rate=400.0, n_requests=40, seconds=5.0,
                                  timeout=5.0, seed=0)
            await asyncio.wait(handlers, timeout=5.0)   # each sees its connection closed by the client, and ends
            return out

    records, _, _ = asyncio.run(run())
    assert len(served) == 41   # the dropped request was sent again, on a new connection
    assert len(records) == 40, len(records)
    # the server's 1st, 3rd, ... 41st requests were refused, its 4th, 6th, ... 40th answered (its 2nd dropped)
    assert collections.Counter(r.status for r in records) == {429: 21, 200: 19}, \
        [(r.status, r.error) for r in records if r.status not in (200, 429)]
    assert all(r.text == "A dog." and r.latency > 0 for r in records if r.status == 200)


class Replay:
    """A connection whose answer is `raw`, handed to on_chunk cut at `cuts` (as Connection hands a stream's
    chunks), recording the path it was sent to."""

    def __init__(self, raw, cuts):
        self.raw, self.cuts, self.paths = raw, cuts, []

    async def post(self, path, body, on_chunk, timeout):
        self.paths.append(path)
        if on_chunk is not None:
            bounds = [0, *self.cuts, len(self.raw)]
            for a, b in zip(bounds, bounds[1:]):
                if b > a:
                    on_chunk(0.0, self.raw[a:b])
        return 200, {}, self.raw


CHAT_STREAM = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in [
    {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
    {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "Now is"}}]},
    {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": " the"}}]},
    {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
    {"object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 3,
                                                                  "total_tokens": 7}},
]) + b"data: [DONE]\n\n"


def test_openai_answers_read_their_text_and_the_servers_token_count():
    """The GPT runs' endpoints (benchmarks/serve_load/gpt.py): a chat stream cut at every byte gives the deltas
    joined and the usage's completion_tokens (the run sums the server's count); [DONE] ends it; a whole completion
    gives its text and count; a stream without [DONE] is a failure, not an answer."""
    chat, completions = apis.Chat(max_tokens=3), apis.Completions(max_tokens=3)
    assert json.loads(chat.body("Now", True)) == {"messages": [{"role": "user", "content": "Now"}], "max_tokens": 3,
                                                  "temperature": 0, "stream": True,
                                                  "stream_options": {"include_usage": True}}
    for cut in [[], *([c] for c in range(1, len(CHAT_STREAM))), list(range(1, len(CHAT_STREAM)))]:
        record, conn = Record(0), Replay(CHAT_STREAM, cut)
        asyncio.run(client._exchange(conn, record, chat.body("Now", True), True, 5.0, chat))
        assert (record.status, record.text, record.tokens, conn.paths) == (200, "Now is the", 3,
                                                                          ["/v1/chat/completions"])
        assert record.ttft is not None and len(record.gaps) == 1   # two pieces of text
    whole = json.dumps({"object": "text_completion", "choices": [{"text": " winter", "index": 0}],
                        "usage": {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}}).encode()
    record = Record(0)
    asyncio.run(client._exchange(Replay(whole, []), record, completions.body("Now is", False), False, 5.0,
                                 completions))
    assert (record.status, record.text, record.tokens) == (200, " winter", 2)
    record = Record(0)
    cut_short = CHAT_STREAM[:CHAT_STREAM.index(b"data: [DONE]")]
    asyncio.run(client._exchange(Replay(cut_short, []), record, chat.body("Now", True), True, 5.0, chat))
    assert record.status == 599 and "without its done event" in record.error
