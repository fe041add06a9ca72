"""The engine under threads, for ThreadSanitizer too (scripts/sanitize.sh runs this file without torch or the
conftest): Python threads submit, cancel and poll while the engine's loop steps two models (a Transformer in
float32, a GPT in int8), or while a Transformer (int8, float32) steps in lanes, one a thread; every request ends
exactly once."""
import threading
import time

import numpy as np
import pytest

import ctransformer as ct
from ctransformer._core.serve import SequenceOptions
from waiting import HANG

pytestmark = pytest.mark.threads   # threads, the serving engine or the server: make test-stress runs it under load


def submit_cancel_and_poll(engine, submit, count=30):
    """Three threads submit `count` requests each (submit(rng, i) -> request id), cancelling every fifth, while a
    fourth polls; every request must end exactly once, finished, cancelled or timed out. Returns the engine's stats
    once every request has ended (before stop())."""
    submitted, ends, lock = [], {}, threading.Lock()
    stop = threading.Event()
    all_ended = threading.Condition(lock)

    def client(seed):
        rng = np.random.default_rng(seed)
        for i in range(count):
            request = submit(rng, i)
            with lock:
                submitted.append(request)
            if i % 5 == 0:
                engine.cancel(request)
            time.sleep(0.001)   # pacing only: the requests arrive while others decode, in whatever order

    def poller():
        while not stop.is_set():
            for event in engine.poll(0.01):
                if event.kind in ("finished", "cancelled", "timed_out"):
                    with lock:
                        assert event.request not in ends, f"event.request {event.request} ended twice"
                        ends[event.request] = event.kind
                        all_ended.notify_all()
                else:
                    assert event.kind == "token"

    threads = [threading.Thread(target=client, args=(s,)) for s in range(3)] + [threading.Thread(target=poller)]
    for t in threads:
        t.start()
    for t in threads[:3]:
        t.join()
    with lock:
        all_ended.wait_for(lambda: len(ends) == len(submitted), timeout=HANG)
    stop.set()
    threads[3].join()
    stats = engine.stats()
    engine.stop()
    assert sorted(ends) == sorted(submitted), f"{len(ends)} of {len(submitted)} requests ended in {HANG} s"
    assert stats["finished_total"] + stats["cancelled_total"] + stats["timed_out_total"] == len(submitted) == 3 * count
    assert stats["queue_depth"] == 0 and stats["rows_in_use"] == 0
    return stats


def test_submit_cancel_and_poll_from_threads():
    ct.manual_seed(0)
    translator = ct.nn.Transformer(40, 40, 0, 0, d_word_vec=32, d_model=32, d_inner=64, n_layers=2, n_head=4,
                                   d_k=8, d_v=8, dropout=0.0).eval()
    gpt = ct.quantize_dynamic(ct.nn.GPT(40, 16, 2, 32, 4, 64, dropout=0.0).eval())
    engine = ct._core.serve.Engine(max_queue=1000, max_rows=8, max_batch_tokens=128)
    engine.add_model("t", translator, 1, 2)
    engine.add_model("g", gpt)

    def submit(rng, i):
        source = [int(t) for t in rng.integers(3, 40, int(rng.integers(1, 10)))]
        if i % 3 == 0:
            return engine.submit("g", source, SequenceOptions(max_len=len(source) + 8, temperature=0.9, seed=i))
        return engine.submit("t", source + [2], SequenceOptions(max_len=12, beam_size=1 + i % 3))

    submit_cancel_and_poll(engine, submit)


def set_threads_or_skip(num_threads, threads=2):
    """Lanes are one a thread: the maths on 2 threads (of the pool; the machine may have one core, or be busy)."""
    num_threads(threads)
    if ct.get_num_threads() != threads:
        pytest.skip(f"the pool runs {ct.get_num_threads()} threads, not {threads}")


@pytest.mark.parametrize("precision", ["int8", "float32"])
def test_submit_cancel_and_poll_while_lanes_step(precision, num_threads):
    """A Transformer's batch runs as one lane a thread (serve/engine.cpp, run_lanes): each lane admits, steps and
    leaves on its own thread while clients submit, cancel and time out requests (float32: the lanes read the loop
    thread's packed weights, SharedPacking). Lane mode is forced, not hoped for: with lane_rows=1 the batch splits as
    soon as its rows reach the threads (2), which the first beam request (2 or 3 rows) does in the turn that sees
    it, and stays split while 2 rows remain. Every request ends once, and the lanes have merged after stop()."""
    ct.manual_seed(0)
    model = ct.nn.Transformer(40, 40, 0, 0, d_word_vec=32, d_model=32, d_inner=64, n_layers=2, n_head=4, d_k=8,
                              d_v=8, dropout=0.0).eval()
    if precision == "int8":
        model = ct.quantize_dynamic(model)
    set_threads_or_skip(num_threads)
    engine = ct._core.serve.Engine(max_queue=1000, max_rows=48, max_batch_tokens=1024, lane_rows=1)
    engine.add_model("t", model, 1, 2)

    def submit(rng, i):
        source = [int(t) for t in rng.integers(3, 40, int(rng.integers(1, 10)))] + [2]
        # some time out (waiting, or while decoding), beams of 2 and 3 too
        return engine.submit("t", source, SequenceOptions(max_len=40, beam_size=1 + i % 3),
                             timeout=0.005 if i % 7 == 3 else 0.0)

    stats = submit_cancel_and_poll(engine, submit, count=40)
    assert stats["lane_runs_total"] >= 1, "lane_rows=1 and beams of 2 rows: the batch must have split into lanes"
    assert engine.stats()["lanes"] == 1   # after stop(): the lanes have merged


def test_lane_rows_zero_never_splits_and_is_checked(num_threads):
    """lane_rows=0 keeps one batch whatever its rows (the products split over the threads instead); a negative count
    is refused by name."""
    ct.manual_seed(0)
    model = ct.quantize_dynamic(ct.nn.Transformer(40, 40, 0, 0, d_word_vec=32, d_model=32, d_inner=64, n_layers=1,
                                                  n_head=4, d_k=8, d_v=8, dropout=0.0).eval())
    set_threads_or_skip(num_threads)
    engine = ct._core.serve.Engine(max_queue=64, max_rows=48, max_batch_tokens=1024, lane_rows=0)
    engine.add_model("t", model, 1, 2)
    requests = {engine.submit("t", [5 + i % 30, 6, 2], SequenceOptions(max_len=20, beam_size=3)) for i in range(16)}
    ended = set()
    deadline = time.monotonic() + HANG
    while ended != requests and time.monotonic() < deadline:
        ended |= {e.request for e in engine.poll(0.05) if e.kind == "finished"}
    stats = engine.stats()
    engine.stop()
    assert ended == requests and stats["lane_runs_total"] == 0
    with pytest.raises(ValueError, match="lane_rows"):
        ct._core.serve.Engine(lane_rows=-1)


def test_int8_rows_split_over_threads_are_bit_for_bit(num_threads):
    """An int8 model's batch split into one batch a thread, each stepped on its own thread (lanes, serve/engine.cpp):
    40 greedy requests and 14 beams of 3 (42 rows) at once, on 2 threads, each equal to its source decoded alone, ids
    and scores exactly (the int8 products are exact; the rest is row by row, in whichever lane, through the split
    into lanes and the merge back). lane_rows=1 forces the split (below). The end symbol is the target id the
    sources' greedy decodes reach least, and max_len is 60, so the requests live for many steps, in whichever lane admitted them."""
    ct.manual_seed(1)
    model = ct.quantize_dynamic(ct.nn.Transformer(40, 40, 0, 0, d_word_vec=32, d_model=32, d_inner=64, n_layers=2,
                                                  n_head=4, d_k=8, d_v=8, dropout=0.0).eval())
    rng = np.random.default_rng(7)
    srcs = [[int(t) for t in rng.integers(3, 40, int(rng.integers(2, 12)))] + [2] for _ in range(40)]
    max_len = 60
    reached = np.bincount(np.concatenate([ct.decode.greedy_decode(model, np.array([src]), None, max_len, 1)[0, 1:]
                                          for src in srcs]), minlength=40)
    end = min(range(2, 40), key=lambda t: reached[t])
    set_threads_or_skip(num_threads)
    # Each round: (source, beam size) requests, submitted at once. The first round leads with a beam of 2, whose 2
    # rows split the batch in the turn that sees it (the greedy requests behind it join either lane).
    for round_ in ([(0, 2)] + [(s, 1) for s in range(40)], [(s, 3) for s in range(14)]):
        engine = ct._core.serve.Engine(max_queue=64, max_rows=48, max_batch_tokens=1024, lane_rows=1)
        engine.add_model("t", model, 1, end)
        request_of = {engine.submit("t", srcs[s], SequenceOptions(max_len=max_len, beam_size=beam)): (s, beam)
                      for s, beam in round_}
        results, deadline = {}, time.monotonic() + HANG
        while len(results) < len(round_) and time.monotonic() < deadline:
            for event in engine.poll(0.05):
                assert event.kind in ("token", "finished"), (event.kind, event.message)
                if event.kind == "finished":
                    results[request_of[event.request]] = (list(event.ids), event.score)
        stats = engine.stats()
        engine.stop()
        assert len(results) == len(round_), f"{len(results)} of {len(round_)} requests ended in {HANG} s"
        assert stats["lane_runs_total"] >= 1 and engine.stats()["lanes"] == 1
        for (s, beam), (ids, score) in results.items():
            if beam == 1:
                row = ct.decode.greedy_decode(model, np.array([srcs[s]]), None, max_len, 1, end)[0]
            else:
                alone, alone_score = ct.decode.beam_search(model, np.array([srcs[s]]), None, max_len, 1, end,
                                                           beam_size=beam)
                row = alone[0]
                assert score == alone_score[0], f"source {s}, beam {beam}"
            got = [1] + ids
            got += [end] if len(got) < max_len else []
            np.testing.assert_array_equal(got + [0] * (max_len - len(got)), row, err_msg=f"source {s}, beam {beam}")


def test_stop_while_another_thread_polls():
    """stop() from one thread while another waits in poll(): the poll returns (with the cancellations) and the two
    never touch the engine's thread object at once."""
    ct.manual_seed(0)
    translator = ct.nn.Transformer(40, 40, 0, 0, d_word_vec=32, d_model=32, d_inner=64, n_layers=2, n_head=4,
                                   d_k=8, d_v=8, dropout=0.0).eval()
    engine = ct._core.serve.Engine(max_queue=64, max_rows=2, max_batch_tokens=64)
    engine.add_model("t", translator, 1, 2)
    submitted = [engine.submit("t", [5, 6, 7, 2], SequenceOptions(max_len=150)) for _ in range(8)]
    seen = []

    def poller():
        deadline = time.monotonic() + 20
        while len(seen) < len(submitted) and time.monotonic() < deadline:
            seen.extend(e.kind for e in engine.poll(1.0) if e.kind != "token")

    thread = threading.Thread(target=poller)
    thread.start()
    time.sleep(0.05)
    stoppers = [threading.Thread(target=engine.stop) for _ in range(2)]
    for t in stoppers:
        t.start()
    for t in stoppers + [thread]:
        t.join()
    assert len(seen) == len(submitted) and set(seen) <= {"finished", "cancelled"}


NICE_SCRIPT = r"""
import os, time
os.nice(2)   # first, so every thread inherits it; the engine's threads go `nice` levels above the thread making it
import numpy as np
import ctransformer as ct
from ctransformer._core.serve import SequenceOptions

def nices():   # {thread name: [nice values]} of this process's threads; stat's 19th field is the nice value
    out = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/comm") as f:
            name = f.read().strip()
        with open(f"/proc/self/task/{tid}/stat") as f:
            nice = int(f.read().rsplit(")", 1)[1].split()[16])
        out.setdefault(name, []).append(nice)
    return out

def settled(workers):
    # nices() once `workers` pool workers have started and set their nice (a new thread takes its name and nice
    # when the machine first runs it, which on a loaded one can be later than the product that made it), or after
    # 30 s, as they are then.
    deadline = time.monotonic() + 30
    while True:
        state = nices()
        if sorted(state.get("ct-worker", [])) == [7] * workers or time.monotonic() > deadline:
            return state
        time.sleep(0.01)

def step(engine):   # one request through the engine, so that the pool's workers run
    request = engine.submit("t", [5, 6, 7, 2], SequenceOptions(max_len=6))
    while not any(e.request == request and e.kind == "finished" for e in engine.poll(1.0)):
        pass

ct.manual_seed(0)
model = ct.nn.Transformer(40, 40, 0, 0, d_word_vec=32, d_model=32, d_inner=64, n_layers=1, n_head=4, d_k=8, d_v=8,
                          dropout=0.0).eval()
ct.set_num_threads(2)
x = ct.tensor(np.ones((512, 512), dtype=np.float32))
x @ x   # a product split over the pool: it exists before the engine, and its workers are reniced
engine = ct._core.serve.Engine(nice=5)
engine.add_model("t", model, 1, 2)
step(engine)
before = settled(1)
ct.set_num_threads(3)
x @ x   # a new pool, made from this thread: its workers start at the engine's level all the same
step(engine)
after = settled(2)
engine.stop()
print(repr((before, after)))
"""


def test_nice_lowers_the_engine_and_the_pool_workers_only():
    """Engine(nice=5): the engine's thread and the pool's workers, those running and those started later, run 5
    nice levels above the thread that made the engine (here at 2, so 7); the other threads keep their nice (2). In a
    subprocess: a thread's nice cannot be lowered again without a privilege."""
    import ast
    import subprocess
    import sys

    import pytest
    if not sys.platform.startswith("linux"):
        with pytest.raises(ValueError, match="Linux only"):
            ct._core.serve.Engine(nice=5)
        return
    run = subprocess.run([sys.executable, "-c", NICE_SCRIPT], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    before, after = ast.literal_eval(run.stdout.strip().splitlines()[-1])
    assert before["ct-engine"] == [7] and before["ct-worker"] == [7]
    assert after["ct-engine"] == [7] and after["ct-worker"] == [7, 7]
    others = [nice for name, values in after.items() if not name.startswith("ct-") for nice in values]
    assert others and set(others) == {2}
    for bad in (-1, 20):
        with pytest.raises(ValueError, match="nice must be from 0 to 19"):
            ct._core.serve.Engine(nice=bad)
