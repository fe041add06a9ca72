"""The load client: a minimal HTTP/1.1 client over asyncio, and the closed and open loops that drive it. Raw
HTTP/1.1 over keep-alive connections, not an HTTP library, so that the client costs the 2 shared cores as little as
possible (Connection, run_client)."""
import asyncio
import functools
import gc
import random
import time

from .apis import TRANSLATE


class Closed(Exception):
    """The server closed the connection before the answer began (a keep-alive connection it had dropped)."""


class Connection(asyncio.Protocol):
    """One keep-alive connection to 127.0.0.1:port. `post` sends a JSON body and returns a future of the answer
    (status, headers, body): read by Content-Length, or chunk by chunk (a stream), calling on_chunk(time, bytes) as
    each chunk arrives.

    A protocol, not asyncio's streams: the answer is parsed in the callback that receives its bytes (an answer
    usually arrives whole), where the streams took a coroutine switch per header line. On the two cores the client
    shares with the server this matters: at twice saturation (~900 arrivals/s) the streams' client took 300 us of
    CPU a request, about a quarter of a core that the server under test lost."""

    def __init__(self):
        self.transport, self.closed, self.used = None, False, False
        self.buffer = bytearray()
        self.answer = self.on_chunk = self.timer = None
        self.status = self.headers = self.need = None   # the answer being read: its head, then its body
        self.parts = []

    @classmethod
    async def open(cls, port):
        _, conn = await asyncio.get_running_loop().create_connection(cls, "127.0.0.1", port)
        return conn

    def connection_made(self, transport):
        self.transport = transport

    def close(self):
        if not self.closed:
            self.closed = True
            self.transport.close()

    def post(self, path, body, on_chunk=None, timeout=None):
        """The answer's future; after `timeout` seconds without it, it fails with asyncio.TimeoutError and the
        connection is closed."""
        loop = asyncio.get_running_loop()
        self.used, self.on_chunk = True, on_chunk
        self.answer = loop.create_future()
        if self.closed:
            self.answer.set_exception(Closed())
            return self.answer
        if timeout is not None:
            self.timer = loop.call_later(timeout, self._fail, asyncio.TimeoutError())
        self.transport.write(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (path.encode("ascii"), len(body), body))
        return self.answer

    def data_received(self, data):
        self.buffer += data
        try:
            self._parse()
        except (ValueError, IndexError) as error:   # not HTTP as expected: the answer fails, the connection ends
            self._fail(error)

    def connection_lost(self, exc):
        self.closed = True
        if self.need == -1 and self.status is not None:   # no length: the body ran to the connection's end
            self.parts.append(bytes(self.buffer))
            self._finish()
        elif self.status is None and not self.buffer:
            self._fail(Closed())   # nothing of the answer came: a kept-alive connection the server had dropped
        else:
            self._fail(asyncio.IncompleteReadError(bytes(self.buffer), None))

    def _parse(self):
        buffer = self.buffer
        while self.answer is not None and not self.answer.done():
            if self.status is None:   # the head
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    return
                lines = bytes(buffer[:end]).decode("latin-1").split("\r\n")
                del buffer[:end + 4]
                self.status = int(lines[0].split()[1])
                self.headers = {}
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    self.headers[name.strip().lower()] = value.strip()
                if "content-length" in self.headers:
                    self.need = int(self.headers["content-length"])
                elif self.headers.get("transfer-encoding", "").lower() == "chunked":
                    self.need = None   # the next chunk's size line
                else:
                    self.need = -1   # until the connection ends
            elif self.need == -1:
                return
            elif "content-length" in self.headers:
                if len(buffer) < self.need:
                    return
                self.parts.append(bytes(buffer[:self.need]))
                del buffer[:self.need]
                self._finish()
            else:   # chunked: a size line, then that many bytes and CRLF; size 0, then trailers up to an empty line
                if self.need is None:
                    end = buffer.find(b"\r\n")
                    if end < 0:
                        return
                    self.need = int(bytes(buffer[:end]).split(b";")[0], 16)
                    del buffer[:end + 2]
                if self.need == 0:
                    end = buffer.find(b"\r\n") if buffer[:2] == b"\r\n" else buffer.find(b"\r\n\r\n")
                    if end < 0:
                        return
                    del buffer[:end + (2 if end == 0 else 4)]
                    self._finish()
                elif len(buffer) < self.need + 2:
                    return
                else:
                    chunk = bytes(buffer[:self.need])
                    del buffer[:self.need + 2]
                    self.need = None
                    if self.on_chunk is not None:
                        self.on_chunk(time.perf_counter(), chunk)
                    self.parts.append(chunk)

    def _finish(self):
        answer, headers = (self.status, self.headers, b"".join(self.parts)), self.headers
        self._reset()
        if headers.get("connection", "").lower() == "close":
            self.close()
        future, self.answer = self.answer, None
        if future is not None and not future.done():
            future.set_result(answer)

    def _fail(self, error):
        self._reset()
        self.close()
        future, self.answer = self.answer, None
        if future is not None and not future.done():
            future.set_exception(error)

    def _reset(self):
        if self.timer is not None:
            self.timer.cancel()
        self.status = self.headers = self.need = self.timer = None
        self.parts = []


class Record:
    """One request's outcome. latency: seconds from its send to its last byte; ttft and gaps: a stream's first
    piece and the seconds between its pieces; lag: an open-loop request's delay past its scheduled arrival;
    tokens: the output tokens the server counted (OpenAI's usage), None where the run counts them."""
    __slots__ = ("index", "status", "latency", "ttft", "gaps", "text", "error", "lag", "end", "tokens")

    def __init__(self, index):
        self.index, self.status, self.latency, self.ttft, self.gaps = index, None, None, None, None
        self.text, self.error, self.lag, self.end, self.tokens = None, None, 0.0, None, None


async def _exchange(conn, record, body, stream, timeout, api):
    """Send one request on `conn`; fills `record`. asyncio.TimeoutError after `timeout` seconds."""
    events, buffer, start = [], [b""], time.perf_counter()

    def on_chunk(t, chunk):
        buffer[0] += chunk
        while b"\n\n" in buffer[0]:
            event, buffer[0] = buffer[0].split(b"\n\n", 1)
            if event.startswith(b"data: "):
                events.append((t, api.event(event[len(b"data: "):])))

    status, _, data = await conn.post(api.path, body, on_chunk if stream else None, timeout)
    if not stream:
        _fill(record, status, data, start, api)
        return
    if not _ended(record, status, data, start):
        return
    pieces = [t for t, e in events if e.text is not None and not e.done]
    done = [e for _, e in events if e.done]
    failed = [e for _, e in events if e.error is not None]
    if failed or not done:
        record.status, record.error = (failed[0].status if failed else 599), \
            (failed[0].error if failed else "the stream ended without its done event")
        return
    record.text = done[0].text if done[0].text is not None else \
        "".join(e.text for _, e in events if e.text is not None and not e.done)
    record.tokens = next((e.tokens for _, e in events if e.tokens is not None), None)
    if pieces:
        record.ttft = pieces[0] - start
        record.gaps = [b - a for a, b in zip(pieces, pieces[1:])]


def _ended(record, status, data, start):
    """`record`'s end, latency and status, and the error of an answer other than 200; True for a 200."""
    record.end = time.perf_counter()
    record.latency = record.end - start
    record.status = status
    if status != 200:
        record.error = data[:200].decode("utf-8", "replace")
    return status == 200


def _fill(record, status, data, start, api):
    """`record` of a whole (not streamed) answer."""
    if not _ended(record, status, data, start):
        return
    try:
        record.text, record.tokens = api.answer(data)
    except (ValueError, KeyError, IndexError, TypeError) as error:
        record.status, record.error = None, _failure(error, None)


def _failure(error, timeout):
    """What a failed request's record says."""
    if isinstance(error, Closed):
        return "connection closed before the answer"
    if isinstance(error, asyncio.TimeoutError):
        return f"no answer within {timeout:g} s"
    return f"{type(error).__name__}: {error}"


async def request(conn, port, record, sentence, stream, timeout, api=TRANSLATE):
    """One request on `conn` (or a fresh connection when it is closed), at most `timeout` seconds; returns the
    connection to use next (None once a failure has closed it). A reused connection that the server had
    dropped is opened again and the request sent once more. api: the endpoint and its shapes (apis.py)."""
    body = api.body(sentence, stream)
    for attempt in (0, 1):
        try:
            if conn is None or conn.closed:
                conn = await Connection.open(port)
            reused = conn.used
            await _exchange(conn, record, body, stream, timeout, api)
            return conn
        except Closed as error:
            if attempt == 0 and reused:
                conn = None
                continue
            record.status, record.error = None, _failure(error, timeout)
        except (asyncio.TimeoutError, OSError, asyncio.IncompleteReadError, ValueError, IndexError, KeyError) as error:
            record.status, record.error = None, _failure(error, timeout)
        if conn is not None:
            conn.close()
        return None
    return None


def run_client(coroutine):
    """Run the load client's coroutine on uvloop when it is installed (as the serve extra installs it for the
    servers), else on asyncio's loop. On the 2 shared cores the client's CPU is taken from the server under test:
    at 2x saturation with small int8 (~470 arrivals/s) the client took 9-11% of a core on uvloop and 11-14% on
    asyncio in three alternating rounds (2026-11-29).

    The garbage collector is off while the client runs (the run is bounded; what it leaves is collected after):
    its passes over the thousands of records and connections stalled the client's loop for up to 45-75 ms at 2x
    saturation, and every request in flight then looked that much slower, whichever server answered it."""
    try:
        import uvloop
    except ImportError:
        uvloop = None
    gc.collect()
    gc.freeze()   # what earlier runs left (records, sentences) is not scanned again
    gc.disable()
    try:
        return uvloop.run(coroutine) if uvloop is not None else asyncio.run(coroutine)
    finally:
        gc.enable()
        gc.unfreeze()
        gc.collect()


async def closed_loop(port, sentences, clients, n_requests, seconds, stream, timeout, first=0, api=TRANSLATE):
    """`clients` clients each sending its next request when its last is answered, until n_requests were sent or
    `seconds` passed. (records, wall seconds from first send to last answer, client CPU seconds)."""
    conns = [await Connection.open(port) for _ in range(clients)]
    records, sent = [], [0]
    cpu0, t0 = time.process_time(), time.perf_counter()
    stop = t0 + seconds

    async def client(conn):
        while sent[0] < n_requests and time.perf_counter() < stop:
            index = (first + sent[0]) % len(sentences)
            sent[0] += 1
            record = Record(index)
            records.append(record)
            conn = await request(conn, port, record, sentences[index], stream, timeout, api)
        if conn is not None:
            conn.close()

    await asyncio.gather(*(client(c) for c in conns))
    return records, time.perf_counter() - t0, time.process_time() - cpu0


async def open_loop(port, sentences, rate, n_requests, seconds, timeout, seed, first=0, max_connections=1024,
                    api=TRANSLATE):
    """Poisson arrivals at `rate` requests/s (seeded) for n_requests arrivals or `seconds`, whichever first; each
    on an idle keep-alive connection or a new one. Answers still outstanding when sending stops are waited for
    (each at most `timeout`). (records, wall seconds from first send to last answer, client CPU seconds)."""
    rng = random.Random(seed)
    idle = [await Connection.open(port) for _ in range(min(64, n_requests))]
    records, tasks, opened = [], [], [len(idle)]

    async def fire_on_new(record, sentence):
        """A request without an idle connection (or whose kept-alive one the server had dropped)."""
        if opened[0] >= max_connections:
            record.error = f"client: more than {max_connections} connections open"
            return
        opened[0] += 1
        conn = await request(None, port, record, sentence, False, timeout, api)
        if conn is not None:
            idle.append(conn)
        else:
            opened[0] -= 1

    def answered(conn, record, sentence, start, future):
        error = future.exception()
        if error is None:
            status, _, data = future.result()
            _fill(record, status, data, start, api)
            if record.status is None or conn.closed:   # an answer that was not JSON: the connection goes too
                conn.close()
                opened[0] -= 1
            else:
                idle.append(conn)
            return
        opened[0] -= 1
        if isinstance(error, Closed):   # a kept-alive connection the server had dropped: once more, on a new one
            tasks.append(asyncio.ensure_future(fire_on_new(record, sentence)))
        else:
            record.status, record.error = None, _failure(error, timeout)

    def fire(record, sentence, due):
        """Sends on an idle connection from this callback, the answer read by the connection's protocol and
        recorded by a callback too: a task and three coroutines a request were a third of the client's CPU."""
        start = time.perf_counter()
        record.lag = start - due
        if not idle:
            tasks.append(asyncio.ensure_future(fire_on_new(record, sentence)))
            return
        conn = idle.pop()
        future = conn.post(api.path, api.body(sentence, False), None, timeout)
        future.add_done_callback(functools.partial(answered, conn, record, sentence, start))
        tasks.append(future)

    cpu0, t0 = time.process_time(), time.perf_counter()
    due = t0
    for i in range(n_requests):
        if i:
            due += rng.expovariate(rate)
        if due - t0 > seconds:
            break
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        index = (first + i) % len(sentences)
        record = Record(index)
        records.append(record)
        fire(record, sentences[index], due)
    while tasks:   # each request is bounded by `timeout`; a retry adds a task
        waiting, tasks[:] = list(tasks), []
        await asyncio.wait(waiting)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    for conn in idle:
        conn.close()
    return records, wall, cpu
