"""The engine under threads, for ThreadSanitizer too (scripts/sanitize.sh runs this file without torch or the
conftest): Python threads submit, cancel and poll while the engine's loop steps two models (a Transformer in
float32, a GPT in int8), and every request ends exactly once, finished or cancelled."""
import threading
import time

import numpy as np

import ctransformer as ct


def test_submit_cancel_and_poll_from_threads():
    ct.manual_seed(0)
    translator = ct.nn.Transformer(40, 40, 0, 0, d_word_vec=32, d_model=32, d_inner=64, n_layers=2, n_head=4,
                                   d_k=8, d_v=8, dropout=0.0).eval()
    gpt = ct.quantize_dynamic(ct.nn.GPT(40, 16, 2, 32, 4, 64, dropout=0.0).eval())
    engine = ct._core.serve.Engine(max_queue=1000, max_rows=8, max_batch_tokens=128)
    engine.add_model("t", translator, 1, 2)
    engine.add_model("g", gpt)
    submitted, ends, lock = [], {}, threading.Lock()
    stop = threading.Event()

    def client(seed):
        rng = np.random.default_rng(seed)
        for i in range(30):
            source = [int(t) for t in rng.integers(3, 40, int(rng.integers(1, 10)))]
            if i % 3 == 0:
                request = engine.submit("g", source, max_len=len(source) + 8, temperature=0.9, seed=i)
            else:
                request = engine.submit("t", source + [2], max_len=12, beam_size=1 + i % 3)
            with lock:
                submitted.append(request)
            if i % 5 == 0:
                engine.cancel(request)
            time.sleep(0.001)

    def poller():
        while not stop.is_set():
            for request, kind, *_ in engine.poll(0.01):
                if kind in ("finished", "cancelled"):
                    with lock:
                        assert request not in ends, f"request {request} ended twice"
                        ends[request] = kind
                else:
                    assert kind == "token"

    threads = [threading.Thread(target=client, args=(s,)) for s in range(3)] + [threading.Thread(target=poller)]
    for t in threads:
        t.start()
    for t in threads[:3]:
        t.join()
    deadline = time.monotonic() + 60
    while len(ends) < len(submitted) and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    threads[3].join()
    stats = engine.stats()
    engine.stop()
    assert sorted(ends) == sorted(submitted)
    assert stats["finished_total"] + stats["cancelled_total"] == len(submitted) == 90
    assert stats["queue_depth"] == 0 and stats["rows_in_use"] == 0


def test_stop_while_another_thread_polls():
    """stop() from one thread while another waits in poll(): the poll returns (with the cancellations) and the two
    never touch the engine's thread object at once."""
    ct.manual_seed(0)
    translator = ct.nn.Transformer(40, 40, 0, 0, d_word_vec=32, d_model=32, d_inner=64, n_layers=2, n_head=4,
                                   d_k=8, d_v=8, dropout=0.0).eval()
    engine = ct._core.serve.Engine(max_queue=64, max_rows=2, max_batch_tokens=64)
    engine.add_model("t", translator, 1, 2)
    submitted = [engine.submit("t", [5, 6, 7, 2], max_len=150) for _ in range(8)]
    seen = []

    def poller():
        deadline = time.monotonic() + 20
        while len(seen) < len(submitted) and time.monotonic() < deadline:
            seen.extend(kind for _, kind, *_ in engine.poll(1.0) if kind != "token")

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
    request = engine.submit("t", [5, 6, 7, 2], max_len=6)
    while not any(r == request and kind == "finished" for r, kind, *_ in engine.poll(1.0)):
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
