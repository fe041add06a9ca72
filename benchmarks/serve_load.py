"""Serving under load: ctransformer-serve against CTranslate2 behind the same HTTP stack (issue 49, item 4).

    python benchmarks/serve_load.py [--quick] [--sizes small,base] [--trained [NAME=]CHECKPOINT]
        [--precisions float32,int8]
        [--servers ours,ct2-per-request,ct2-batching] [--out FILE.json] [--plot FILE.png]

The models: random-weight post-norm Transformers of the benchmark shapes (cases.POST_NORM `small`, `base`), built as
the multi30k task builds its model (translator.build_model: one embedding shared by source, target and output),
with a sentencepiece BPE vocabulary of the shape's size trained on Multi30k's training text (both sides, as the
task does), saved as a multi30k checkpoint in a temporary folder, so that `ctransformer-serve` loads it as it
loads a trained one, and exported to CTranslate2 (ct.export.to_ctranslate2). The inputs: Multi30k test2016's
German sources (mixed lengths), in a fixed shuffled order that every server receives alike. The outputs are capped
at max_decoding_length=50, the README's 50 output tokens (the checkpoint's max_len_ratio is set so high that the
cap alone decides; random weights seldom choose the end, so most outputs run to it). With --trained
[NAME=]CHECKPOINT, a trained multi30k checkpoint too (``ctransformer-train multi30k --checkpoint PATH``), with its
own vocabulary, copied with greedy search and the same length rule: its outputs end where the model ends them, so
they are of mixed lengths as a served translator's are, and a batch of the 10 ms batching server waits for its
longest sentence. Every server's answers are checked against our offline Translator's (ctransformer-translate's).

The servers, one at a time, each a subprocess on a free 127.0.0.1 port, started and stopped here, with a pause
between them; never two loaded at once:
- `ours`: `python -m ctransformer.serve.cli --model NAME=CKPT --precision float32|int8 --threads 2`, the
  continuous-batching engine;
- `ct2-per-request`: a minimal Starlette app in this file (``serve_load.py --anchor-server ct2-per-request``)
  exposing the same POST /v1/translate, which tokenises with the same sentencepiece model and calls
  ctranslate2.Translator.translate_batch once per request, on a one-thread executor;
- `ct2-batching`: the same app collecting sentences for up to 10 ms (from the first one's arrival) or 32
  sentences, then one translate_batch: CTranslate2's recommended pattern for independent requests.
Each is served by uvicorn in one process with its defaults (uvloop and httptools when installed, as the serve extra
installs them; the tables name the stack), and each refuses with 429 when more
than --max-queue sentences wait. CTranslate2 runs as ct2_process.py runs it at its documented best: inter_threads=1,
intra_threads=2, loaded on a short-lived thread, and in the fastest of its documented backend/ISA settings
(ct2_process.fastest), chosen by timing batch-32 calls for the batching server and batch-1 calls for the
per-request one. Its offline batch-32 figure may also take inter_threads=2 (two batches at once, a thread each),
as our Translator takes its batches a thread each; a server keeps inter_threads=1 (a wave is one batch).

The load (an asyncio client in this process, on uvloop when installed, raw HTTP/1.1 over keep-alive connections,
so that the client costs the 2 shared cores as little as possible; its own CPU time is reported, so a client-bound
figure shows):
- closed loop at 1, 2, 4, 8, 16, 32, 64 clients: each client sends its next request when its last is answered;
  a level stops sending after --requests-per-level requests or --seconds-per-level seconds, whichever first;
- ours only: a streamed pass (server-sent events, greedy) at a few concurrencies, for the time to the first
  piece and the time between pieces. The server sends a piece per finished word, not per subword, so these are
  per-word times;
- open loop: Poisson arrivals at fractions of the measured saturation (the best closed-loop requests/s of that
  server) up to 2x, each sending at its rate for --seconds-per-level (at most 20,000 requests), so that past
  saturation the queue fills and 429s are sent; answers still outstanding when sending stops are waited for at
  most --request-timeout seconds.
Every request: one text, beam_size 1, max_decoding_length 50. Recorded per request: status, end-to-end latency,
time to first piece and the gaps between pieces (streams), and its output tokens, counted by encoding the returned
translation with the same vocabulary, plus one for the end, at most 50 (the same count for every engine and for
the offline figures). Per level: requests/s and output tokens/s of the answered requests over the level's time
(first send to last answer), latency percentiles, 429s, errors, the client's own CPU time (time.process_time), the
server's CPU time and every other process's on the machine (/proc: a neighbour's compile on this shared machine shows
there, and CTranslate2's OpenMP barriers suffer most from it), and the share of answers equal to the same engine's
offline batch-32 translation (CTranslate2's per-request server may run another backend, the one fastest at batch 1,
whose int8 differs on random weights' near-ties; ours: equal off the knife edge, issue 49 item 1).

Offline anchors in the same run, on the same sentences, with no server running: ctransformer's Translator
(beam_size=1, batch_size=32; and batch_size=1 on a few sentences) and CTranslate2's translate_batch
(max_batch_size=32; and 1). And, while ours is running and idle, three paired passes that take the machine's
drift out of the comparisons: each sentence through the Translator at batch 1 in this process, then through the
server by one client, in turn (paired_one_client); rounds of a few seconds of the Translator at batch 32, then as
long of the same sentences through the server by 32 clients, counted in steady state, after a warm-up
(paired_batch); and 32 clients, then Poisson arrivals at twice the rate they were answered, in turn, both counted
in steady state (paired_saturation). Then the issue's ratios: ours at 32 clients against our offline batch-32 (the
paired rounds' median), against the per-request and the 10 ms batching CTranslate2 servers at 32 clients (with
the p99s beside), p99 / p50 on the mixed lengths, the paired pass's p50 difference from offline batch-1, and at
2x saturation the 429s' latency and the throughput against 32 clients' (the paired rounds' median).

Output: a Markdown table, a JSON file (--out, default benchmarks/results/serve_load_<date>.json) with the CPU, its
SIMD flags and OpenBLAS's core, and a plot of throughput against p99 latency, one line per server (--plot, default
beside the JSON, .png; altair + vl-convert, as ctransformer.plots). A smoke run: --quick --sizes small.
"""
import argparse
import asyncio
import collections
import contextlib
import datetime
import functools
import gc
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

THREADS = 2                  # the machine's cores: the servers' threads and CTranslate2's intra_threads
MAX_DECODING_LENGTH = 50     # the README's 50 output tokens
MAX_LEN_RATIO = 100.0        # the checkpoint's ratio rule, so high that max_decoding_length alone caps an output
MAX_BATCH = 32               # the batching anchor's and the offline figures' batch
PER_CALL = THREADS * MAX_BATCH   # sentences per offline call in the paired rounds: a batch of 32 a thread (lanes)
WINDOW_MS = 10.0             # the batching anchor's collection window
LEVEL_GAP_S = 1.0            # the pause before each level: the last level's answers and spinning threads settle
CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)
STREAM_CONCURRENCY = (1, 8, 32)
OPEN_FRACTIONS = (0.5, 1.0, 1.5, 2.0)
OPEN_MAX_REQUESTS = 20000    # an open level's bound in requests (it also stops after --seconds-per-level)
QUICK = dict(concurrency=(1, 4, 16), stream_concurrency=(1, 4), open_fractions=(1.0, 2.0), requests_per_level=24,
             seconds_per_level=5.0, sentences=64, max_queue=64, offline_calls=1, batch1_sentences=4, warmup=4,
             paired_sentences=4, paired_rounds=1, paired_batch_seconds=1.0, paired_saturation_rounds=1,
             paired_saturation_seconds=2.0,
             pause=1.0, request_timeout=30.0)
FULL = dict(concurrency=CONCURRENCY, stream_concurrency=STREAM_CONCURRENCY, open_fractions=OPEN_FRACTIONS,
            requests_per_level=300, seconds_per_level=30.0, sentences=1000, max_queue=256, offline_calls=3,
            paired_sentences=24, paired_rounds=3, paired_batch_seconds=4.0, paired_saturation_rounds=3,
            paired_saturation_seconds=5.0,
            batch1_sentences=16, warmup=16, pause=3.0, request_timeout=60.0)
SERVERS = ("ours", "ct2-per-request", "ct2-batching")
LABELS = {"ours": "ctransformer-serve", "ct2-per-request": "CTranslate2 per request",
          "ct2-batching": "CTranslate2 10 ms batching"}
# The instruction-set flags worth naming for a CPU's figures (as /proc/cpuinfo names them).
SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
              "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")


# --- a minimal HTTP/1.1 client over asyncio streams ---------------------------------------------------------------
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
    piece and the seconds between its pieces; lag: an open-loop request's delay past its scheduled arrival."""
    __slots__ = ("index", "status", "latency", "ttft", "gaps", "text", "error", "lag", "end")

    def __init__(self, index):
        self.index, self.status, self.latency, self.ttft, self.gaps = index, None, None, None, None
        self.text, self.error, self.lag, self.end = None, None, 0.0, None


@functools.lru_cache(maxsize=4096)   # the levels send the same sentences over and over
def _body(sentence, stream):
    return json.dumps({"texts": [sentence], "beam_size": 1, "max_decoding_length": MAX_DECODING_LENGTH,
                       **({"stream": True} if stream else {})}).encode("utf-8")


async def _exchange(conn, record, body, stream, timeout):
    """Send one request on `conn`; fills `record`. asyncio.TimeoutError after `timeout` seconds."""
    events, buffer, start = [], [b""], time.perf_counter()

    def on_chunk(t, chunk):
        buffer[0] += chunk
        while b"\n\n" in buffer[0]:
            event, buffer[0] = buffer[0].split(b"\n\n", 1)
            if event.startswith(b"data: "):
                events.append((t, json.loads(event[len(b"data: "):])))

    status, _, data = await conn.post("/v1/translate", body, on_chunk if stream else None, timeout)
    if not stream:
        _fill(record, status, data, start)
        return
    if not _ended(record, status, data, start):
        return
    pieces = [t for t, e in events if "text" in e]
    done = [e for _, e in events if e.get("done")]
    failed = [e for _, e in events if "error" in e]
    if failed or not done:
        record.status, record.error = (failed[0].get("status", 500) if failed else 599), \
            (failed[0]["error"] if failed else "the stream ended without its done event")
        return
    record.text = done[0]["translation"]
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


def _fill(record, status, data, start):
    """`record` of a whole (not streamed) answer."""
    if not _ended(record, status, data, start):
        return
    try:
        record.text = json.loads(data)["translations"][0]
    except (ValueError, KeyError, IndexError, TypeError) as error:
        record.status, record.error = None, _failure(error, None)


def _failure(error, timeout):
    """What a failed request's record says."""
    if isinstance(error, Closed):
        return "connection closed before the answer"
    if isinstance(error, asyncio.TimeoutError):
        return f"no answer within {timeout:g} s"
    return f"{type(error).__name__}: {error}"


async def request(conn, port, record, sentence, stream, timeout):
    """One request on `conn` (or a fresh connection when it is closed), at most `timeout` seconds; returns the
    connection to use next (None once a failure has closed it). A reused connection that the server had
    dropped is opened again and the request sent once more."""
    body = _body(sentence, stream)
    for attempt in (0, 1):
        try:
            if conn is None or conn.closed:
                conn = await Connection.open(port)
            reused = conn.used
            await _exchange(conn, record, body, stream, timeout)
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


async def closed_loop(port, sentences, clients, n_requests, seconds, stream, timeout, first=0):
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
            conn = await request(conn, port, record, sentences[index], stream, timeout)
        if conn is not None:
            conn.close()

    await asyncio.gather(*(client(c) for c in conns))
    return records, time.perf_counter() - t0, time.process_time() - cpu0


async def open_loop(port, sentences, rate, n_requests, seconds, timeout, seed, first=0, max_connections=1024):
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
        conn = await request(None, port, record, sentence, False, timeout)
        if conn is not None:
            idle.append(conn)
        else:
            opened[0] -= 1

    def answered(conn, record, sentence, start, future):
        error = future.exception()
        if error is None:
            status, _, data = future.result()
            _fill(record, status, data, start)
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
        future = conn.post("/v1/translate", _body(sentence, False), None, timeout)
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


# --- statistics -----------------------------------------------------------------------------------------------------
def percentile(values, q):
    import numpy as np
    return float(np.percentile(values, q)) if len(values) else None


def ms(value):
    return None if value is None else round(1000.0 * value, 3)


class CPUWatch:
    """CPU time over a level (or an offline call), from /proc: the server's (all its threads; or CTranslate2's
    worker process) and everything else's on the machine (the busy time in /proc/stat, hypervisor steal included,
    less this process's and the server's), each in % of one core, as top shows it. On this shared machine a
    neighbour's compile shows here: OpenMP's barriers (CTranslate2's) and any thread pool stall when a core is
    taken from under them.

    Ours' server time is split further: its maths threads' (the engine's, named ct-engine, and the thread pool's,
    ct-worker) and the rest (the event loop and the poller, Python). On two cores the client, the event loop and the
    maths share the machine: what the first two take at a level is what the maths lose."""
    TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    MATHS_THREADS = ("ct-engine", "ct-worker")

    def __init__(self, server_pid=None):
        self.pids = (os.getpid(), server_pid)
        self.start = self.read()

    @staticmethod
    def _ticks(stat_path):
        """utime + stime from a /proc stat file (a process's: all its threads)."""
        with open(stat_path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])

    @classmethod
    def _process(cls, pid):
        try:
            return cls._ticks(f"/proc/{pid}/stat")
        except (OSError, IndexError, ValueError, TypeError):
            return 0

    @classmethod
    def _maths(cls, pid):
        """utime + stime of the process's threads named in MATHS_THREADS (0 when it has none, as CTranslate2's)."""
        total = 0
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except (OSError, TypeError):
            return 0
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    if f.read().strip() not in cls.MATHS_THREADS:
                        continue
                total += cls._ticks(f"/proc/{pid}/task/{tid}/stat")
            except (OSError, IndexError, ValueError):
                continue   # a thread that ended meanwhile
        return total

    def read(self):
        try:
            with open("/proc/stat") as f:
                v = [int(x) for x in f.readline().split()[1:]]
            busy = sum(v[:8]) - v[3] - v[4]   # user nice system irq softirq steal (guest is inside user)
        except (OSError, IndexError, ValueError):
            busy = 0
        server = self.pids[1]
        return (time.perf_counter(), busy, [self._process(pid) if pid else 0 for pid in self.pids],
                self._maths(server) if server else 0)

    def stop(self):
        """{"server_cpu_pct", "others_cpu_pct", "server_maths_cpu_pct" (None for a server without maths threads)}
        since the start."""
        t1, busy1, procs1, maths1 = self.read()
        t0, busy0, procs0, maths0 = self.start
        wall = max(t1 - t0, 1e-9) * self.TICK / 100.0   # ticks in 1% of one core
        mine, server = (b - a for a, b in zip(procs0, procs1))
        return {"server_cpu_pct": server / wall, "others_cpu_pct": max(0.0, busy1 - busy0 - mine - server) / wall,
                "server_maths_cpu_pct": (maths1 - maths0) / wall if maths1 else None}


def summarize(records, wall, cpu, count_tokens, offline_texts=None):
    """The level's figures (see the module's docstring)."""
    ok = [r for r in records if r.status == 200]
    rejected = [r for r in records if r.status == 429]
    errors = [r for r in records if r.status not in (200, 429)]
    tokens = [count_tokens(r.text) for r in ok]
    latency = [r.latency for r in ok]
    ttft = [r.ttft for r in ok if r.ttft is not None]
    gaps = [g for r in ok if r.gaps for g in r.gaps]
    out = {"requests": len(records), "ok": len(ok), "rejected_429": len(rejected), "errors": len(errors),
           "error_kinds": dict(collections.Counter(f"{r.status}: {r.error}"[:160] for r in errors).most_common(5)),
           "wall_s": round(wall, 4), "requests_per_s": len(ok) / wall if wall else 0.0,
           "tokens_per_s": sum(tokens) / wall if wall else 0.0,
           "tokens_per_request": sum(tokens) / len(ok) if ok else None,
           "p50_ms": ms(percentile(latency, 50)), "p90_ms": ms(percentile(latency, 90)),
           "p99_ms": ms(percentile(latency, 99)), "max_ms": ms(max(latency)) if latency else None,
           "latency_429_p50_ms": ms(percentile([r.latency for r in rejected], 50)),
           "latency_429_p99_ms": ms(percentile([r.latency for r in rejected], 99)),
           "ttft_p50_ms": ms(percentile(ttft, 50)), "ttft_p99_ms": ms(percentile(ttft, 99)),
           "inter_piece_p50_ms": ms(percentile(gaps, 50)), "inter_piece_p99_ms": ms(percentile(gaps, 99)),
           "client_lag_p99_ms": ms(percentile([r.lag for r in records], 99)),
           "client_cpu_s": round(cpu, 4), "client_cpu_pct": 100.0 * cpu / wall if wall else 0.0,
           "latencies_ms": [round(1000.0 * x, 2) for x in latency]}
    if offline_texts is not None:   # the server's answers against the same engine's offline batch-32 translations
        same = [r.text == offline_texts[r.index] for r in ok]
        out["same_as_offline"] = sum(same) / len(same) if same else None
    return out


# --- the CTranslate2 anchor servers (run as: serve_load.py --anchor-server MODE ...) -------------------------------
def anchor_server(argv):
    p = argparse.ArgumentParser(prog="serve_load.py --anchor-server")
    p.add_argument("--anchor-server", required=True, choices=["ct2-per-request", "ct2-batching"])
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
        if a.anchor_server == "ct2-batching":
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
        if a.anchor_server == "ct2-per-request":
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
    print(f"{a.anchor_server}: listening on http://127.0.0.1:{sock.getsockname()[1]} "
          f"(CTranslate2 {ctranslate2.__version__} {translator.compute_type}, "
          f"{' '.join(f'{k}={v}' for k, v in os.environ.items() if k.startswith('CT2_')) or 'its defaults'})",
          flush=True)
    server.run(sockets=[sock])


# --- starting and stopping a server ---------------------------------------------------------------------------------
def _libc():
    try:
        import ctypes
        return ctypes.CDLL(None)   # opened here, in the parent: the child between fork and exec only calls it
    except OSError:
        return None


_LIBC = _libc()


def _die_with_parent():
    """In the child before exec: SIGTERM when this benchmark dies (Linux prctl PR_SET_PDEATHSIG), so that no
    server outlives it even when it is killed outright."""
    try:
        _LIBC.prctl(1, signal.SIGTERM)
    except Exception:  # noqa: BLE001 - not Linux: the finally blocks still stop it
        pass


class Server:
    """A server subprocess: its output goes to a log file; `port` once it printed its listening line and /ready
    answered 200 (at most `timeout` seconds)."""

    def __init__(self, name, argv, env, folder, timeout):
        self.name = name
        self.log_path = os.path.join(folder, f"{name}.log")
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                        preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout
        self.port = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{name} exited with code {self.process.returncode}:\n{self.output()[-3000:]}")
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.output())
            if found and self.ready(int(found.group(1))):
                self.port = int(found.group(1))
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{name} was not ready within {timeout:g} s:\n{self.output()[-3000:]}")

    def output(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    @staticmethod
    def ready(port):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.sendall(b"GET /ready HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                return s.recv(64).split(b" ")[1] == b"200"
        except (OSError, IndexError):
            return False

    def get(self, path):
        """The body of GET path (the server's /metrics)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        return data.split(b"\r\n\r\n", 1)[-1].decode("utf-8", "replace")

    def stop(self, timeout=20.0):
        """SIGTERM (ours drains, uvicorn stops), then SIGKILL after `timeout` seconds; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        return self.process.returncode


def engine_counters(text):
    """The engine's counters from ours' /metrics: tokens, steps, step seconds, rejected."""
    out = {}
    for name, key in (("ctransformer_tokens_total", "tokens"), ("ctransformer_steps_total", "steps"),
                      ("ctransformer_step_seconds_sum", "step_seconds"), ("ctransformer_rejected_total", "rejected")):
        found = re.search(rf"^{name} ([0-9.eE+-]+)$", text, re.M)
        if found:
            out[key] = float(found.group(1))
    return out


# --- models, vocabularies, offline figures --------------------------------------------------------------------------
def save_served_checkpoint(folder, name, model, cfg, vocab):
    """`model` as a multi30k checkpoint with `vocab` inside, folder/name.safetensors, as ctransformer-serve loads it."""
    from ctransformer.checkpoint import save_checkpoint
    from ctransformer.translator import TASK

    path = os.path.join(folder, f"{name}.safetensors")
    save_checkpoint(path, model, config=cfg, extra={"task": TASK, "sentencepiece": vocab.as_array()})
    return path


def build_checkpoint(size, folder, vocab):
    """A random-weight multi30k checkpoint of the shape `size` (cases.POST_NORM) with `vocab`: (path, model)."""
    import ctransformer as ct
    from ctransformer.translator import build_model

    from cases import POST_NORM
    c = POST_NORM[size]
    cfg = {"d_model": c["d_model"], "n_head": c["n_head"], "d_inner": c["d_inner"], "n_layers": c["n_layers"],
           "dropout": 0.1, "n_position": 200, "scale_emb_or_prj": c.get("scale_emb_or_prj", "prj"),
           "beam_size": 1, "length_penalty": 0.6, "max_len_ratio": MAX_LEN_RATIO, "train_src": ""}
    ct.manual_seed(0)
    model = build_model(cfg, len(vocab))
    model.eval()
    return save_served_checkpoint(folder, size, model, cfg, vocab), cfg


def copy_trained_checkpoint(path, folder, name):
    """A trained multi30k checkpoint (ctransformer-train multi30k --checkpoint PATH) copied into `folder` with
    greedy search and the same length rule as the random-weight ones (MAX_LEN_RATIO: max_decoding_length alone
    caps an output, as it caps CTranslate2's): (path, config, vocab). Its outputs end where the model ends them."""
    from ctransformer.translator import load_translation_checkpoint

    model, vocab, cfg = load_translation_checkpoint(path)
    if model.quantization is not None:
        raise SystemExit(f"--trained: {path} holds an {model.quantization} model; give its float32 checkpoint "
                         "(the benchmark quantises it for --precisions int8)")
    cfg = dict(cfg, beam_size=1, max_len_ratio=MAX_LEN_RATIO)
    return save_served_checkpoint(folder, name, model, cfg, vocab), cfg, vocab


def our_translator(checkpoint, precision, batch_size):
    """ctransformer's greedy Translator on the checkpoint at the precision (int8 quantised after loading) and batch
    size, as the offline figures and the paired passes use it; returns (translator, model)."""
    from ctransformer.translator import Translator, load_translation_checkpoint

    model, vocab, cfg = load_translation_checkpoint(checkpoint)
    if precision == "int8":
        model.quantize("int8")
    translator = Translator(model, vocab, beam_size=1, max_len_ratio=cfg["max_len_ratio"], batch_size=batch_size,
                            warn=lambda message: None)
    return translator, model


def offline_ours(checkpoint, precision, sentences, calls, batch1_sentences):
    """ctransformer's Translator on the sentences, greedy, batch 32 (median of `calls` after a warm-up; its batches
    a thread each, ct.decode.search_batches' lanes) and batch 1 (a few sentences, one call each: a latency, not two
    sentences at once): the figures and the batch-32 translations."""
    import ctransformer as ct
    import measure

    ct.set_num_threads(THREADS)
    out = {}
    for batch, chosen in ((MAX_BATCH, sentences), (1, sentences[:batch1_sentences])):
        translator, model = our_translator(checkpoint, precision, batch)
        texts = []
        translator.translate(chosen[:batch], max_decoding_length=MAX_DECODING_LENGTH)   # warm-up
        def call():
            if batch == 1:
                texts.append([translator.translate([s], max_decoding_length=MAX_DECODING_LENGTH)[0] for s in chosen])
            else:
                texts.append(translator.translate(chosen, max_decoding_length=MAX_DECODING_LENGTH))
        watch = CPUWatch()
        times = [measure.timed(call, measure.GAP_S) for _ in range(calls)]
        out[batch] = {"seconds": sorted(times)[len(times) // 2], "times": times, "sentences": len(chosen),
                      "texts": texts[0], "others_cpu_pct": watch.stop()["others_cpu_pct"]}
        del translator, model
    return out


def paired_one_client(port, checkpoint, precision, sentences, n, timeout):
    """One client, paired: for each of n sentences, ctransformer's Translator at batch 1 in this process, then the
    same sentence sent to the running server (idle between requests), with a short pause before each. A 1-client
    level's p50 against offline batch-1 figures taken minutes apart, on other sentences, moved by tens of ms from
    run to run on this shared machine (one level's figure was +45 ms, the same request paired -16 ms); the paired
    difference takes the drift out. Returns (server - offline) seconds per sentence, and the records."""
    import measure

    translator, model = our_translator(checkpoint, precision, 1)
    translator.translate(sentences[:1], max_decoding_length=MAX_DECODING_LENGTH)   # warm-up

    async def run():
        conn, differences, records = await Connection.open(port), [], []
        conn = await request(conn, port, Record(0), sentences[0], False, timeout)   # warm-up
        for i, sentence in enumerate(sentences[:n]):
            await asyncio.sleep(measure.GAP_S / 3)   # the server's spinning threads, the last call's, settle
            start = time.perf_counter()
            translator.translate([sentence], max_decoding_length=MAX_DECODING_LENGTH)
            offline = time.perf_counter() - start
            await asyncio.sleep(measure.GAP_S / 3)
            record = Record(i)
            conn = await request(conn, port, record, sentence, False, timeout)
            records.append(record)
            if record.status == 200:
                differences.append(record.latency - offline)
        if conn is not None:
            conn.close()
        return differences, records

    try:
        return run_client(run())
    finally:
        del translator, model


def tokens_in_window(records, count_tokens, begin, end):
    """Output tokens of the answered requests decoded in [begin, end), each answer's tokens spread evenly over its
    request's time (send to answer): a steady rate with no step at each answer, whichever requests straddle the
    window's edges."""
    total = 0.0
    for r in records:
        if r.status != 200 or r.end is None:
            continue
        sent = r.end - r.latency
        overlap = min(r.end, end) - max(sent, begin)
        if overlap > 0:
            total += count_tokens(r.text) * overlap / max(r.latency, 1e-9)
    return total


def paired_batch(port, checkpoint, precision, sentences, seconds, rounds, timeout, count_tokens):
    """32 clients, paired, in steady state: in each round, ctransformer's Translator at batch 32 on successive
    sentences for `seconds` in this process, then the same sentences sent by 32 closed-loop clients to the running
    server (idle during the offline calls) for a warm-up and `seconds` more, counting the tokens decoded after the
    warm-up (tokens_in_window). The same drift that moved the one-client figures moved the separate offline batch-32
    figure by 15% from one run to the next; in turn, each round's ratio compares like with like. Steady state,
    because a round of a few requests a client measures the ramp instead: the 32 first requests arrive at once, the
    server's Python turns them around one by one (about 30 ms for 32 on two busy cores), so they start over a spread
    of steps and end over one, and rounds of 96 sentences (three a client) lost 10-20% to that, at the start and the
    end. The warm-up is two offline batch-32 calls' time (the first wave and the spread it leaves), at least a
    second; the window at least four calls' time. Returns each round's (offline tokens/s, server tokens/s)."""
    translator, model = our_translator(checkpoint, precision, MAX_BATCH)
    translator.translate(sentences[:MAX_BATCH], max_decoding_length=MAX_DECODING_LENGTH)   # warm-up
    out = []
    first = 0
    try:
        for k in range(rounds):
            time.sleep(LEVEL_GAP_S)
            tokens, calls, start = 0, 0, time.perf_counter()
            while calls < 2 or time.perf_counter() - start < seconds:
                # a batch a thread in each call, as the offline figure's call runs them (search_batches' lanes)
                chosen = [sentences[(first + calls * PER_CALL + i) % len(sentences)] for i in range(PER_CALL)]
                texts = translator.translate(chosen, max_decoding_length=MAX_DECODING_LENGTH)
                tokens += sum(count_tokens(t) for t in texts)
                calls += 1
            elapsed = time.perf_counter() - start
            offline, per_call = tokens / elapsed, elapsed / calls
            warmup, window = max(1.0, 2.0 * per_call), max(seconds, 4.0 * per_call)
            time.sleep(LEVEL_GAP_S)
            begin = time.perf_counter() + warmup
            records, _, _ = run_client(closed_loop(port, sentences, MAX_BATCH, 10 ** 9, warmup + window, False,
                                                    timeout, first=first))
            server = tokens_in_window(records, count_tokens, begin, begin + window) / window
            out.append((offline, server))
            first += calls * PER_CALL
    finally:
        del translator, model
    return out


def paired_saturation(port, sentences, fraction, seconds, rounds, max_queue, timeout, count_tokens):
    """Saturation and `fraction` x saturation, paired in steady state: 32 closed-loop clients and Poisson arrivals
    at `fraction` x the requests/s the closed round before answered, in turn (closed, open, closed, ..., closed),
    each open round against the mean of the closed rounds either side of it, so that a drift that is linear over a
    round cancels. The levels measure saturation and 2x saturation a minute apart, and this machine drifts by 10-30%
    from minute to minute. Tokens are counted in a window after a warm-up (tokens_in_window): the closed rounds'
    warm-up is 2 s; the open rounds' is the time the queue takes to fill at the excess rate and a request then
    takes to wait through it, plus 1 s, and their sending stops a second after the window (answers outstanding
    are waited for). Returns (rounds: [{"closed_before", "open", "closed_after" tokens/s, "rate_per_s"}],
    the open rounds' 429 latencies in seconds)."""
    first = [0]

    def closed():
        warmup = 2.0
        begin = time.perf_counter() + warmup
        records, _, _ = run_client(closed_loop(port, sentences, MAX_BATCH, 10 ** 9, warmup + seconds, False, timeout,
                                                first=first[0]))
        first[0] += len(records)
        answered = sum(1 for r in records if r.status == 200 and r.end is not None and begin <= r.end < begin + seconds)
        return tokens_in_window(records, count_tokens, begin, begin + seconds) / seconds, answered / seconds

    def open_(rate, seed):
        saturation = rate / fraction
        warmup = max_queue / saturation * (1.0 / max(fraction - 1.0, 0.1) + 1.0) + 1.0
        begin = time.perf_counter() + warmup
        n = int(rate * (warmup + seconds + 1.0)) + 1
        records, _, _ = run_client(open_loop(port, sentences, rate, n, warmup + seconds + 1.0, timeout, seed=seed,
                                              first=first[0]))
        first[0] += len(records)
        rejected = [r.latency for r in records if r.status == 429 and r.latency is not None]
        return tokens_in_window(records, count_tokens, begin, begin + seconds) / seconds, rejected

    out, rejected = [], []
    time.sleep(LEVEL_GAP_S)
    before, per_s = closed()
    for k in range(rounds):
        time.sleep(LEVEL_GAP_S)
        rate = fraction * per_s
        tokens, refused = open_(rate, seed=1000 + k)
        rejected += refused
        time.sleep(LEVEL_GAP_S)
        after, per_s = closed()
        out.append({"closed_before": before, "open": tokens, "closed_after": after, "rate_per_s": rate})
        before = after
    return out, rejected


def offline_ct2(ct2_path, compute_type, sources, pieces_to_text, calls, batch1_sentences, tune_sentences=128):
    """CTranslate2 on the same sources, at batch 32 (all of them) and batch 1 (the first batch1_sentences): for
    each, the fastest of its documented settings (ct2_process.fastest, timed on at most tune_sentences), then a
    warm-up and `calls` timed calls in that setting (the median); the figures, the settings chosen and the
    batch-32 translations."""
    import measure
    from ct2_process import fastest

    out = {}
    for batch, chosen in ((MAX_BATCH, sources), (1, sources[:batch1_sentences])):
        options = dict(beam_size=1, max_batch_size=batch, max_decoding_length=MAX_DECODING_LENGTH)
        # batch 32: batches in parallel tried too (inter_threads), as our Translator takes its batches a thread
        # each; batch 1 is a latency, one sentence at a time, as ours.
        worker = fastest(ct2_path, compute_type, THREADS, chosen[:tune_sentences], options, calls=1,
                         batches_in_parallel=batch > 1)
        try:
            if len(chosen) > tune_sentences:   # fastest() timed a part: a warm-up on the whole
                worker.set_source(chosen)
                worker.run(**options)
            times, texts = [], None
            watch = CPUWatch(worker.proc.pid)
            for _ in range(calls):
                time.sleep(measure.GAP_S)
                answer = worker.run(hypotheses=texts is None, **options)
                times.append(answer["seconds"])
                if texts is None:
                    texts = [pieces_to_text(h) for h in answer["hypotheses"]]
            out[batch] = {"seconds": sorted(times)[len(times) // 2], "times": times, "sentences": len(chosen),
                          "texts": texts, "config": worker.config, "settings_timed": worker.timings,
                          "version": worker.info["version"], "compute_type": worker.info["compute_type"],
                          "others_cpu_pct": watch.stop()["others_cpu_pct"]}
        finally:
            worker.close()
    return out


# --- the run --------------------------------------------------------------------------------------------------------
def cpu_description(ct):
    model = None
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        found = re.search(r"^Model name:\s*(.+)$", lscpu, re.M)
        model = found.group(1).strip() if found else None
    except (OSError, subprocess.SubprocessError):
        pass
    import measure
    from ct2_process import cpu_flags
    flags = cpu_flags() or set()
    info = ct.build_info()
    return {"model": model or measure.cpu_model(), "simd_flags": [f for f in SIMD_FLAGS if f in flags],
            "ct_cpu": info["cpu"], "blas_core": info["blas"]["core"], "blas": info["blas"], "cores": os.cpu_count()}


def run_server_levels(kind, server, sentences, plan, count_tokens, offline_texts, log):
    """Every level of one server: warm-up, closed loop, (ours) streams, open loop. A list of level dicts."""
    levels = []
    timeout = plan["request_timeout"]

    def level(load, value, records, wall, cpu, before, watch):
        row = {"load": load, "value": value, **summarize(records, wall, cpu, count_tokens, offline_texts),
               **watch.stop(), "loadavg_1min": os.getloadavg()[0]}
        if before is not None:
            after = engine_counters(server.get("/metrics"))
            delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
            if delta.get("steps"):
                row["engine_rows_per_step"] = delta["tokens"] / delta["steps"]
                row["engine_step_ms"] = 1000.0 * delta["step_seconds"] / delta["steps"]
        levels.append(row)
        log(f"  {load:7s} {value:>6g}: {row['ok']:4d} ok {row['rejected_429']:3d} x429 {row['errors']:3d} err  "
            f"{row['requests_per_s']:7.2f} req/s {row['tokens_per_s']:8.0f} tok/s  p50 {row['p50_ms'] or 0:8.1f} "
            f"p99 {row['p99_ms'] or 0:8.1f} ms"
            + (f"  ttft p50 {row['ttft_p50_ms']:.1f} ms" if row["ttft_p50_ms"] is not None else "")
            + f"  cpu: client {row['client_cpu_pct']:.0f}% server {row['server_cpu_pct']:.0f}% "
            + (f"(maths {row['server_maths_cpu_pct']:.0f}%) " if row.get("server_maths_cpu_pct") is not None else "")
            + f"others {row['others_cpu_pct']:.0f}%"
            + (f"  engine {row['engine_rows_per_step']:.1f} rows/step, {row['engine_step_ms']:.2f} ms/step"
               if "engine_rows_per_step" in row else "")
            + (f"  errors: {row['error_kinds']}" if row["errors"] else ""))
        return row

    def counters():
        return engine_counters(server.get("/metrics")) if kind == "ours" else None

    run_client(closed_loop(server.port, sentences, min(4, plan["warmup"]), plan["warmup"], 60.0, False, timeout))
    n, seconds = plan["requests_per_level"], plan["seconds_per_level"]
    starts = iter(range(0, 10**9, n))   # level k starts at sentence k * n: every server's level k sends the same ones
    for clients in plan["concurrency"]:
        time.sleep(LEVEL_GAP_S)
        before, watch = counters(), CPUWatch(server.process.pid)
        records, wall, cpu = run_client(closed_loop(server.port, sentences, clients, n, seconds, False, timeout,
                                                     next(starts)))
        level("closed", clients, records, wall, cpu, before, watch)
    if kind == "ours":
        for clients in plan["stream_concurrency"]:
            time.sleep(LEVEL_GAP_S)
            before, watch = counters(), CPUWatch(server.process.pid)
            records, wall, cpu = run_client(closed_loop(server.port, sentences, clients, n, seconds, True, timeout,
                                                         next(starts)))
            level("stream", clients, records, wall, cpu, before, watch)
    closed = [row for row in levels if row["load"] == "closed"]
    saturation = max(closed, key=lambda row: row["requests_per_s"]) if closed else None
    if saturation is None or not saturation["requests_per_s"]:
        return levels
    for k, fraction in enumerate(plan["open_fractions"]):
        time.sleep(LEVEL_GAP_S)
        rate = fraction * saturation["requests_per_s"]
        # An open level sends at its rate for the level's seconds (at most OPEN_MAX_REQUESTS requests):
        # past saturation the queue then fills and 429s are sent, and the ramp from an empty batch at the start
        # and the drain at the end weigh little in its throughput. (A level of n requests at 2x saturation lasted
        # a second or two: mostly ramp and drain, and the queue never filled.)
        n_open = min(int(rate * seconds) + 1, OPEN_MAX_REQUESTS)
        before, watch = counters(), CPUWatch(server.process.pid)
        start = (len(plan["concurrency"]) + len(plan["stream_concurrency"])) * n + k * OPEN_MAX_REQUESTS
        records, wall, cpu = run_client(open_loop(server.port, sentences, rate, n_open, seconds, timeout, seed=k,
                                                   first=start))
        row = level("open", fraction, records, wall, cpu, before, watch)
        row["rate_per_s"] = rate
    return levels


def ratios(size, precision, results, offline):
    """The issue's figures for one size and precision: [(measure, value, target, met or None)]."""
    def closed(kind, clients=32):
        rows = [r for r in results if r["server"] == kind and r["load"] == "closed" and r["ok"]]
        if not rows:
            return None
        return min(rows, key=lambda r: (abs(r["value"] - clients), -r["value"]))

    out = []
    ours = closed("ours")
    if ours is None:
        return out
    at = f"{ours['value']:g} clients"
    ours_b32 = offline["ours"][MAX_BATCH]
    ours_b32_tps = ours_b32["tokens"] / ours_b32["seconds"]
    value = ours["tokens_per_s"] / ours_b32_tps
    paired32 = next((r for r in results if r["server"] == "ours" and r["load"] == "paired"
                     and r["value"] == MAX_BATCH and r["ok"]), None)
    # Judged on the paired rounds when there are some (paired_batch); the level against the separate offline
    # figure is shown beside it.
    out.append((f"ours at {at} / our offline batch-32 (tokens/s)", f"{value:.2f}", ">= 0.85",
                None if paired32 else value >= 0.85))
    if paired32:
        value = paired32["ratio_median"]
        out.append((f"ours at {MAX_BATCH} clients, steady state / our offline batch-32, paired in {paired32['ok']} rounds "
                    "(median)",
                    f"{value:.2f}", ">= 0.85", value >= 0.85))
    for kind, target in (("ct2-per-request", 3.0), ("ct2-batching", 1.5)):
        other = closed(kind, ours["value"])
        if other is None or not other["tokens_per_s"]:
            continue
        value = ours["tokens_per_s"] / other["tokens_per_s"]
        p99_ok = (ours["p99_ms"] or 0) <= (other["p99_ms"] or 0)
        out.append((f"ours / {LABELS[kind]} at {at} (tokens/s; p99 {ours['p99_ms']:.0f} vs {other['p99_ms']:.0f} ms)",
                    f"{value:.2f}", f">= {target:g}, p99 <=", value >= target and p99_ok))
    if ours["p50_ms"]:
        value = ours["p99_ms"] / ours["p50_ms"]
        out.append((f"ours p99 / p50 at {at}, mixed lengths", f"{value:.2f}", "<= 2.5", value <= 2.5))
    one = closed("ours", 1)
    if one is not None and one["value"] == 1 and one["p50_ms"]:
        b1 = offline["ours"][1]
        per_sentence = 1000.0 * b1["seconds"] / b1["sentences"]
        value = one["p50_ms"] - per_sentence
        paired = next((r for r in results if r["server"] == "ours" and r["load"] == "paired" and r["value"] == 1
                       and r["ok"]), None)
        # The target is judged on the paired pass when there is one (paired_one_client: the same sentences, taken
        # in turn); the level's p50 against the separate offline figure is shown beside it.
        out.append((f"ours p50 at 1 client - offline batch-1 ({one['p50_ms']:.1f} - {per_sentence:.1f} ms a sentence)",
                    f"{value:+.1f} ms", "<= 2 ms", None if paired else value <= 2.0))
        if paired:
            value = paired["difference_p50_ms"]
            out.append((f"ours at 1 client - offline batch-1, paired on {paired['ok']} sentences (p50 of the "
                        f"differences)", f"{value:+.1f} ms", "<= 2 ms", value <= 2.0))
    sat = max((r for r in results if r["server"] == "ours" and r["load"] == "closed"),
              key=lambda r: r["requests_per_s"])
    top = [r for r in results if r["server"] == "ours" and r["load"] == "open"]
    if top:
        top = max(top, key=lambda r: r["value"])
        value = top["tokens_per_s"] / sat["tokens_per_s"] if sat["tokens_per_s"] else 0.0
        paired_open = next((r for r in results if r["server"] == "ours" and r["load"] == "paired-open"
                            and r["ok"]), None)
        # Judged on the paired rounds when there are some (paired_saturation); the levels' figure, a minute apart,
        # is shown beside it.
        out.append((f"ours at {top['value']:g}x saturation / saturation (tokens/s; saturation "
                    f"{sat['tokens_per_s']:.0f} at {sat['value']:g} clients)", f"{value:.2f}", ">= 0.95",
                    None if paired_open else value >= 0.95))
        if paired_open:
            value = paired_open["ratio_median"]
            out.append((f"ours at {paired_open['value']:g}x saturation / {MAX_BATCH} clients, steady state, paired in "
                        f"{paired_open['ok']} rounds (median)", f"{value:.2f}", ">= 0.95", value >= 0.95))
        if top["rejected_429"]:
            p99 = top["latency_429_p99_ms"]
            out.append((f"ours 429s at {top['value']:g}x saturation: {top['rejected_429']} of {top['requests']}, p99",
                        f"{p99:.1f} ms", "<= 10 ms", p99 <= 10.0))
        else:
            out.append((f"ours 429s at {top['value']:g}x saturation", "none", "<= 10 ms", None))
    for kind in SERVERS:   # each server at 32 clients against its engine's own offline batch 32
        row = closed(kind)
        engine = "ours" if kind == "ours" else "ct2"
        if row is None or engine not in offline:
            continue
        b32 = offline[engine][MAX_BATCH]
        value = row["tokens_per_s"] / (b32["tokens"] / b32["seconds"])
        out.append((f"{LABELS[kind]} at {row['value']:g} clients / its engine's offline batch-32", f"{value:.2f}", "",
                    None))
    return out


def plot(rows, path):
    """Throughput (output tokens/s) against p99 latency, a line per server (closed loop, labelled by clients),
    a panel per model size."""
    import altair as alt
    import pandas as pd

    from ctransformer.plots import save_png
    frame = pd.DataFrame([{"size": r["size"], "server": LABELS[r["server"]], "precision": r["precision"],
                           "clients": r["value"], "p99 latency (ms)": r["p99_ms"], "output tokens/s": r["tokens_per_s"]}
                          for r in rows if r["load"] == "closed" and r["p99_ms"]])
    if frame.empty:
        return None
    base = alt.Chart().encode(
        alt.X("p99 latency (ms):Q", scale=alt.Scale(type="log")), alt.Y("output tokens/s:Q"),
        alt.Color("server:N", scale=alt.Scale(domain=[LABELS[s] for s in SERVERS])), alt.StrokeDash("precision:N"),
        alt.Order("clients:Q"))
    chart = alt.layer(base.mark_line(point=True),
                      base.mark_text(dx=7, dy=-7, fontSize=9).encode(alt.Text("clients:Q")),
                      data=frame).properties(width=520, height=300).facet(
        row=alt.Row("size:N", title="model shape (labels: clients)"))
    return save_png(chart, path)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if "--anchor-server" in argv:
        return anchor_server(argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a smoke run: 1, 4, 16 clients, a few requests a level")
    p.add_argument("--sizes", default="small,base", help="comma-separated shapes of cases.POST_NORM")
    p.add_argument("--trained", action="append", default=[], metavar="[NAME=]CHECKPOINT",
                   help="a trained multi30k checkpoint (ctransformer-train multi30k --checkpoint PATH) served as well, "
                        "its outputs of mixed lengths (NAME defaults to the file's name); may be repeated")
    p.add_argument("--precisions", default="float32,int8")
    p.add_argument("--servers", default=",".join(SERVERS), help="comma-separated: " + ", ".join(SERVERS))
    p.add_argument("--requests-per-level", type=int, help="requests a level sends at most (full 300, quick 24)")
    p.add_argument("--seconds-per-level", type=float, help="seconds a level sends for at most (full 30, quick 5)")
    p.add_argument("--concurrency", help="comma-separated closed-loop clients (full 1,2,4,8,16,32,64; quick 1,4,16)")
    p.add_argument("--sentences", type=int,
                   help="test2016 sources used, in a fixed shuffled order (full 1000, quick 64)")
    p.add_argument("--max-queue", type=int,
                   help="sentences waiting before a server answers 429 (full 256, quick 64: more than any closed "
                        "loop's clients)")
    p.add_argument("--request-timeout", type=float, help="seconds a request may take (full 60, quick 30)")
    p.add_argument("--start-timeout", type=float, default=180.0, help="seconds a server may take to become ready")
    p.add_argument("--out", help="JSON file (default benchmarks/results/serve_load_<date>.json)")
    p.add_argument("--plot", help="PNG file (default: the JSON file's name with .png)")
    a = p.parse_args(argv)

    plan = dict(QUICK if a.quick else FULL)
    for key in ("requests_per_level", "seconds_per_level", "sentences", "max_queue", "request_timeout"):
        if getattr(a, key) is not None:
            plan[key] = getattr(a, key)
    if a.concurrency:
        plan["concurrency"] = tuple(int(c) for c in a.concurrency.split(","))
    servers = [s for s in a.servers.split(",") if s]
    for s in servers:
        if s not in SERVERS:
            p.error(f"--servers: {s!r} is not one of {', '.join(SERVERS)}")
    precisions = [x for x in a.precisions.split(",") if x]
    for x in precisions:
        if x not in ("float32", "int8"):
            p.error(f"--precisions: {x!r} is not float32 or int8")

    import level_cap
    stand_in = level_cap.apply()   # ct capped at a smaller CPU's level: its peers too (before any of them loads)

    import ctransformer as ct
    import measure
    from cases import POST_NORM
    from ctransformer.data.parallel_corpus import multi30k
    from ctransformer.data.subword import train_subword_vocab
    from ctransformer.translator import load_translation_checkpoint
    sizes = [s for s in a.sizes.split(",") if s]
    for s in sizes:
        if s not in POST_NORM or s in ("tiny", "multi30k"):
            p.error(f"--sizes: {s!r} is not one of small, base")
    trained = {}   # name -> the trained checkpoint's path
    for given in a.trained:
        name, _, path = given.rpartition("=")
        name = name or os.path.splitext(os.path.basename(path))[0]
        if not os.path.isfile(path):
            p.error(f"--trained: {path!r} is not a file")
        if name in sizes or name in trained:
            p.error(f"--trained: the name {name!r} is taken; give another as NAME=CHECKPOINT")
        trained[name] = path
    if not sizes and not trained:
        p.error("--sizes is empty and no --trained checkpoint is given: nothing to serve")
    ct.set_num_threads(THREADS)
    cpu = cpu_description(ct)
    date = datetime.datetime.now()
    out_path = a.out or measure.result_path(os.path.join(HERE, "results"),
                                            "serve_load_" + date.strftime("%Y-%m-%d_%H%M"))
    plot_path = a.plot or os.path.splitext(out_path)[0] + ".png"

    def log(message):
        print(message, flush=True)

    log(f"serve_load: {cpu['model']} ({', '.join(cpu['simd_flags'])}), {cpu['cores']} cores, OpenBLAS core "
        f"{cpu['blas_core']}" + (f" (OPENBLAS_CORETYPE={os.environ['OPENBLAS_CORETYPE']})"
                                 if os.environ.get("OPENBLAS_CORETYPE") else "")
        + f"; {'quick' if a.quick else 'full'} plan: clients {','.join(map(str, plan['concurrency']))}, "
        f"<= {plan['requests_per_level']} requests / {plan['seconds_per_level']:g} s a level")

    test = multi30k("test2016").src[:plan["sentences"]]
    random.Random(0).shuffle(test)
    train = multi30k("train")
    folder = tempfile.mkdtemp(prefix="serve_load_")
    results, offline_rows, ratio_rows = [], [], []
    meta = {"date": date.strftime("%Y-%m-%d %H:%M"), "cpu": cpu, "threads": THREADS, "plan": plan,
            "servers": servers, "sizes": sizes, "trained": trained, "precisions": precisions, "sentences": len(test),
            "max_decoding_length": MAX_DECODING_LENGTH, "argv": sys.argv, "stand_in": stand_in or None,
            "openblas_coretype_env": os.environ.get("OPENBLAS_CORETYPE"), "loadavg_start": os.getloadavg(),
            "http": http_stack()}
    try:
        for size in sizes + list(trained):
            if size in trained:   # its own weights and vocabulary: outputs of the lengths the model gives them
                checkpoint, cfg, vocab = copy_trained_checkpoint(trained[size], folder, size)
            else:
                vocab = train_subword_vocab(train.src + train.tgt, vocab_size=POST_NORM[size]["vocab"])
                checkpoint, cfg = build_checkpoint(size, folder, vocab)
            spm_path = os.path.join(folder, f"{size}.spm.model")
            vocab.save(spm_path)
            model = load_translation_checkpoint(checkpoint)[0]
            pieces = [vocab.processor.id_to_piece(i) for i in range(len(vocab))]
            ct2_path = ct.export.to_ctranslate2(model, os.path.join(folder, f"{size}-ct2"), pieces,
                                                unk_token=pieces[vocab.unk_id], bos_token=pieces[vocab.bos_id],
                                                eos_token=pieces[vocab.eos_id])
            del model
            room = cfg["n_position"] - 1
            sources = [[pieces[i] for i in ids[:room]] + [pieces[vocab.eos_id]] for ids in vocab.encode(test)]

            def pieces_to_text(hyp):
                return vocab.decode([vocab.processor.piece_to_id(x) for x in hyp])

            def count_tokens(text, vocab=vocab):
                return min(len(vocab.encode(text)) + 1, MAX_DECODING_LENGTH) if text is not None else 0

            log(f"\n{size}: {'trained (' + trained[size] + ')' if size in trained else 'random weights'}, "
                f"d_model {cfg['d_model']}, {cfg['n_layers']} layers, {len(vocab)} subwords; "
                f"{len(test)} test2016 sentences of {min(map(len, sources)) - 1}-{max(map(len, sources)) - 1} subwords")
            for precision in precisions:
                offline = {}
                log(f"{size} {precision}: offline figures")
                offline["ours"] = offline_ours(checkpoint, precision, test, plan["offline_calls"],
                                               plan["batch1_sentences"])
                if any(s.startswith("ct2") for s in servers):
                    offline["ct2"] = offline_ct2(ct2_path, precision, sources, pieces_to_text, plan["offline_calls"],
                                                 plan["batch1_sentences"])
                for engine, figures in offline.items():
                    for batch, f in figures.items():
                        if "texts" in f:
                            f["tokens"] = sum(count_tokens(t) for t in f["texts"])
                        row = {"size": size, "precision": precision, "engine": engine, "batch": batch,
                               "seconds": f["seconds"], "sentences": f["sentences"],
                               "ms_per_sentence": 1000.0 * f["seconds"] / f["sentences"],
                               **({"tokens_per_s": f["tokens"] / f["seconds"],
                                   "tokens_per_sentence": f["tokens"] / f["sentences"]} if "tokens" in f else {}),
                               **{k: f[k] for k in ("times", "config", "settings_timed", "version", "compute_type",
                                                    "others_cpu_pct") if k in f}}
                        offline_rows.append(row)
                        log(f"  offline {engine:4s} batch {batch:2d}: {row['ms_per_sentence']:7.2f} ms a sentence"
                            + (f", {row['tokens_per_s']:7.0f} tok/s ({row['tokens_per_sentence']:.1f} tokens a "
                               f"sentence)"
                               if "tokens_per_s" in row else "")
                            + f"  others' CPU {f['others_cpu_pct']:.0f}%"
                            + (f"  [{measure_config(f['config'])}]" if "config" in f else ""))
                for kind in servers:
                    time.sleep(plan["pause"])
                    if kind == "ours":
                        argv_ = [sys.executable, "-m", "ctransformer.serve.cli", "--model", f"{size}={checkpoint}",
                                 "--precision", precision, "--host", "127.0.0.1", "--port", "0", "--threads",
                                 str(THREADS), "--max-queue", str(plan["max_queue"]), "--shutdown-timeout", "10"]
                        env = dict(os.environ)
                        texts = offline["ours"][MAX_BATCH]["texts"]
                    else:
                        config = offline["ct2"][MAX_BATCH if kind == "ct2-batching" else 1]["config"]
                        argv_ = [sys.executable, os.path.abspath(__file__), "--anchor-server", kind, "--ct2-model",
                                 ct2_path, "--spm", spm_path, "--compute-type", precision, "--intra-threads",
                                 str(THREADS), "--max-queue", str(plan["max_queue"]), "--max-source", str(room)]
                        # CTranslate2 at its own defaults plus the setting chosen (as ct2_process.CT2Process runs it)
                        env = {k: v for k, v in os.environ.items()
                               if k != "OMP_WAIT_POLICY" and not k.startswith("CT2_")}
                        from ct2_process import environment
                        env.update(environment(config))   # (inter_threads: the offline figure's alone)
                        texts = offline["ct2"][MAX_BATCH]["texts"]
                    log(f"{size} {precision} {LABELS[kind]}: starting")
                    server = Server(f"{size}-{precision}-{kind}", argv_, env, folder, a.start_timeout)
                    try:
                        levels = run_server_levels(kind, server, test, plan, count_tokens, texts, log)
                        if kind == "ours" and plan["paired_sentences"]:
                            time.sleep(LEVEL_GAP_S)
                            differences, records = paired_one_client(server.port, checkpoint, precision, test,
                                                                     plan["paired_sentences"], plan["request_timeout"])
                            row = {"load": "paired", "value": 1, "requests": len(records),
                                   "ok": len(differences),
                                   "difference_p50_ms": ms(percentile(differences, 50)),
                                   "difference_mean_ms": ms(sum(differences) / len(differences)) if differences
                                   else None, "differences_ms": [round(1000.0 * d, 2) for d in differences]}
                            levels.append(row)
                            log(f"  paired 1 client: {row['ok']} sentences, server - offline batch-1: p50 "
                                f"{row['difference_p50_ms'] or 0:+.1f} ms, mean {row['difference_mean_ms'] or 0:+.1f} ms")
                        if kind == "ours" and plan["paired_rounds"]:
                            pairs = paired_batch(server.port, checkpoint, precision, test, plan["paired_batch_seconds"],
                                                 plan["paired_rounds"], plan["request_timeout"], count_tokens)
                            ratios_ = sorted(b / a for a, b in pairs)
                            row = {"load": "paired", "value": MAX_BATCH, "ok": len(pairs),
                                   "rounds": [{"offline_tokens_per_s": a, "server_tokens_per_s": b} for a, b in pairs],
                                   "ratio_median": ratios_[len(ratios_) // 2]}
                            levels.append(row)
                            log(f"  paired {MAX_BATCH} clients, steady state: server / offline batch-{MAX_BATCH} tokens/s by round: "
                                + ", ".join(f"{b:.0f}/{a:.0f}" for a, b in pairs) + f"; median {row['ratio_median']:.2f}")
                        top = max(plan["open_fractions"], default=None)
                        if kind == "ours" and plan["paired_saturation_rounds"] and top and top > 1.0:
                            rounds, rejected = paired_saturation(
                                server.port, test, top, plan["paired_saturation_seconds"],
                                plan["paired_saturation_rounds"], plan["max_queue"], plan["request_timeout"],
                                count_tokens)
                            ratios_ = sorted(2.0 * r["open"] / (r["closed_before"] + r["closed_after"])
                                             for r in rounds)
                            row = {"load": "paired-open", "value": top, "ok": len(rounds), "rounds": rounds,
                                   "ratio_median": ratios_[len(ratios_) // 2], "rejected_429": len(rejected),
                                   "latency_429_p99_ms": ms(percentile(rejected, 99))}
                            levels.append(row)
                            log(f"  paired {top:g}x saturation / {MAX_BATCH} clients, steady state, tokens/s by round: "
                                + ", ".join(f"{r['open']:.0f}/({r['closed_before']:.0f}, {r['closed_after']:.0f})"
                                            for r in rounds)
                                + f"; median {row['ratio_median']:.2f}; {len(rejected)} 429s, p99 "
                                + (f"{row['latency_429_p99_ms']:.1f} ms" if rejected else "-"))
                    finally:
                        code = server.stop()
                    if kind == "ours" and code not in (0, None):
                        log(f"  {LABELS[kind]} exited with code {code}:\n{server.output()[-2000:]}")
                    for row in levels:
                        results.append({"size": size, "precision": precision, "server": kind, **row})
                for measure_, value, target, met in ratios(size, precision,
                                                           [r for r in results if r["size"] == size
                                                            and r["precision"] == precision], offline):
                    ratio_rows.append({"size": size, "precision": precision, "measure": measure_, "value": value,
                                       "target": target, "met": met})
        shutil.rmtree(folder, ignore_errors=True)   # the models, the CTranslate2 exports and the servers' logs
    except BaseException:
        log(f"\nstopped: the models and the servers' logs are kept in {folder}")
        raise
    finally:
        meta["loadavg_end"] = os.getloadavg()
        meta["ctranslate2"] = next((r.get("version") for r in offline_rows if r.get("version")), None)
        meta["build"] = ct.build_info()
        os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
        with open(out_path, "w") as f:
            json.dump({"meta": meta, "offline": offline_rows, "results": results, "ratios": ratio_rows}, f, indent=1)
        log(f"\nwrote {out_path}")
    png = None
    try:
        png = plot(results, plot_path)
    except Exception as error:  # noqa: BLE001 - the figures stand without the plot
        log(f"no plot: {type(error).__name__}: {error}")
    if png:
        log(f"wrote {png}")
    print_tables(meta, offline_rows, results, ratio_rows)
    return 0


def measure_config(config):
    from ct2_process import describe
    return "CTranslate2 " + describe(config)


def http_stack():
    """uvicorn's version and what its defaults (loop="auto", http="auto") pick here: uvloop and httptools when they
    are importable, else asyncio and h11; the load client runs on the same loop (run_client)."""
    import importlib.util
    import uvicorn

    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    return f"uvicorn {uvicorn.__version__} ({loop}, {http}); the client on {loop}"


def print_tables(meta, offline_rows, results, ratio_rows):
    cpu = meta["cpu"]
    print(f"\nServing under load: Multi30k test2016 sources ({meta['sentences']} sentences, mixed lengths), one text a "
          f"request, greedy, max_decoding_length {meta['max_decoding_length']}, random-weight post-norm models"
          + "".join(f", {name} trained ({path})" for name, path in (meta.get("trained") or {}).items()) + "; "
          f"{meta['threads']} threads each; {cpu['model']} ({', '.join(cpu['simd_flags'])}), OpenBLAS core "
          f"{cpu['blas_core']}; CTranslate2 {meta.get('ctranslate2') or '-'}; {meta.get('http') or 'uvicorn'}; load "
          f"{meta['loadavg_start'][0]:.1f} -> {meta['loadavg_end'][0]:.1f}\n")
    if meta["stand_in"]:
        print("A stand-in for a smaller CPU (level_cap.py): "
              + ", ".join(f"{k}={v}" for k, v in meta["stand_in"].items()) + "\n")
    print("Offline (no server running):\n\n| shape | precision | engine | batch | ms a sentence | output tokens/s | "
          "others' CPU % | setting |\n|---|---|---|---:|---:|---:|---:|---|")
    for r in offline_rows:
        print(f"| {r['size']} | {r['precision']} | {'ctransformer' if r['engine'] == 'ours' else 'CTranslate2'} | "
              f"{r['batch']} | {r['ms_per_sentence']:.2f} | "
              + (f"{r['tokens_per_s']:.0f}" if "tokens_per_s" in r else "") + f" | {r['others_cpu_pct']:.0f} | "
              + (measure_config(r["config"]) if "config" in r else "") + " |")
    print("\nUnder load (closed: clients; stream: clients, server-sent events; open: Poisson rate as a multiple of the "
          "server's saturation; CPU in % of one core: the server's (ours: in brackets its maths threads', the engine's "
          "and the thread pool's; the rest is Python's, the event loop's and the poller's), and every other process's "
          "on the machine but this client's):\n\n| shape | precision | server | load | ok | req/s | output tok/s | p50 ms | p90 ms | "
          "p99 ms | first piece p50 ms | between pieces p50 ms | 429s (p99 ms) | errors | same as offline | "
          "client CPU | CPU % server (its maths threads) / others |\n|---|---|---|---|" + "---:|" * 13)

    def f(value, fmt=".1f"):
        return "" if value is None else format(value, fmt)
    for r in results:
        if r["load"] in ("paired", "paired-open"):   # in the targets' table
            continue
        load = {"closed": f"{r['value']:g} clients", "stream": f"{r['value']:g} streams",
                "open": f"{r['value']:g}x ({r.get('rate_per_s', 0):.1f}/s)"}[r["load"]]
        rejected = f"{r['rejected_429']}" + (f" ({r['latency_429_p99_ms']:.1f})" if r["rejected_429"] else "")
        same = r.get("same_as_offline")
        print(f"| {r['size']} | {r['precision']} | {LABELS[r['server']]} | {load} | {r['ok']} | "
              f"{r['requests_per_s']:.2f} | {r['tokens_per_s']:.0f} | {f(r['p50_ms'])} | {f(r['p90_ms'])} | "
              f"{f(r['p99_ms'])} | {f(r['ttft_p50_ms'])} | {f(r['inter_piece_p50_ms'])} | {rejected} | {r['errors']} | "
              f"{'' if same is None else format(100 * same, '.0f') + '%'} | "
              f"{r['client_cpu_s']:.2f} s ({r['client_cpu_pct']:.0f}%) | "
              f"{r['server_cpu_pct']:.0f}"
              + (f" ({r['server_maths_cpu_pct']:.0f})" if r.get("server_maths_cpu_pct") is not None else "")
              + f" / {r['others_cpu_pct']:.0f} |")
    if ratio_rows:
        print("\nThe issue's targets:\n\n| shape | precision | measure | value | target | met |\n"
              "|---|---|---|---:|---|---|")
        for r in ratio_rows:
            met = {True: "yes", False: "no", None: ""}[r["met"]]
            print(f"| {r['size']} | {r['precision']} | {r['measure']} | {r['value']} | {r['target']} | {met} |")


if __name__ == "__main__":
    sys.exit(main())
