"""CTranslate2 in a process of its own, timed call by call, for the benchmarks' side-by-side tables.

CTranslate2's docs run it as its own program: a Translator per process, its threads its own. In the
benchmark's process it shared the machine with torch's OpenMP runtime and OpenBLAS's threads, and our
benchmark printed it 2-6x slower than the same model measured in a process of its own (issue 22).
Here the parent (benchmarks/run.py, translate_speed.py) keeps its round-robin order of engines and
asks this worker for one timed call at a time; the time is taken inside the worker around
translate_batch alone, so the pipe costs CTranslate2 nothing.

    worker = CT2Process(path, compute_type="int8", intra_threads=2)
    worker.set_source(tokens)                      # once: the sources, as lists of token strings
    worker.run(beam_size=5, max_batch_size=32)     # one call; worker.last_seconds is its time
    worker.close()

The worker reads one JSON line per command on stdin and answers one line on stdout.

At its best: CTranslate2 picks its CPU backend and ISA itself, and on AMD CPUs it leaves Intel MKL off
and takes AVX2 (CT2_VERBOSE=1 shows it). Its documented environment variables CT2_USE_MKL=1 and
CT2_FORCE_CPU_ISA=AVX512 change that choice, and on this project's Zen 5 machine its int8 decoding
ran 4-5x faster with either (tiny model, batch 1: 55-60 ms at its defaults, 12-14 ms). `fastest()`
times each of these configurations on the case's own call and keeps the fastest, so CTranslate2 is
measured as a user who read its docs would run it.

The Translator is loaded on a short-lived thread. Loading an int8 model quantises inside an OpenMP
region, and the loading thread keeps that region's team; the process then holds more OpenMP threads
than CPUs and libgomp throttles its spinning: every parallel region sleeps and wakes. Loaded on the
main thread, CTranslate2 int8 took 19-21 ms a greedy call of one short sentence with ~790 voluntary
context switches per call; loaded on a thread that then exits, 1.5-1.6 ms and 1-2 switches (Zen 5,
2 threads, 2026-11-24). Each call's voluntary context switches (all of the worker's threads, from
/proc/self/task/*/status) come back with its time, so a table can show them beside each figure.
"""
import glob
import json
import os
import subprocess
import sys
import threading
import time


class CT2Process:
    """A CTranslate2 Translator loaded in a child process (python ct2_process.py --worker)."""

    def __init__(self, path, compute_type="float32", intra_threads=2, config=None):
        # CTranslate2 at its own defaults (not the OMP_WAIT_POLICY the benchmarks set for torch), plus `config`.
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY" and not k.startswith("CT2_")}
        self.config = dict(config or {})
        env.update(self.config)
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)
        self.last_seconds = self.last_switches = None
        self.info = self._ask({"op": "load", "path": str(path), "compute_type": compute_type,
                               "intra_threads": intra_threads})

    def _ask(self, message):
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"CTranslate2 worker exited (code {self.proc.wait()}) on {message['op']}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"CTranslate2 worker: {answer['error']}")
        return answer

    def set_source(self, tokens):
        self._ask({"op": "source", "tokens": tokens})

    def run(self, hypotheses=False, **options):
        """One translate_batch call on the source with `options`; returns the output token count (and the
        hypotheses when asked). The call's own time is in last_seconds."""
        answer = self._ask({"op": "run", "options": options, "hypotheses": hypotheses})
        self.last_seconds = answer["seconds"]
        self.last_switches = answer["switches"]
        return answer

    def close(self):
        if self.proc.poll() is None:
            self._ask({"op": "quit"})
            self.proc.wait(timeout=30)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Call:
    """One translate_batch of the worker's source with `options`, as a callable the benchmarks time:
    `last_seconds` is the worker's own time of the last call, `config` the CT2_* settings it runs with."""

    def __init__(self, worker, **options):
        self.worker, self.options = worker, options

    def __call__(self):
        return self.worker.run(**self.options)

    @property
    def last_seconds(self):
        return self.worker.last_seconds

    @property
    def last_switches(self):
        return self.worker.last_switches

    @property
    def config(self):
        return self.worker.config


# CTranslate2's own choice, then its documented switches for the backend and the instruction set.
CONFIGS = [{}, {"CT2_USE_MKL": "1"}, {"CT2_FORCE_CPU_ISA": "AVX512"}, {"CT2_USE_MKL": "1", "CT2_FORCE_CPU_ISA": "AVX512"}]


def fastest(path, compute_type, intra_threads, source, options, calls=3):
    """A CT2Process in the configuration (of CONFIGS) whose median of `calls` timed calls (after one
    warm-up) is lowest for this source and these options; the others are closed. Its `timings` holds
    each configuration's median."""
    import statistics

    best, timings = None, []
    for config in CONFIGS:
        worker = CT2Process(path, compute_type, intra_threads, config)
        worker.set_source(source)
        worker.run(**options)
        seconds = statistics.median(worker.run(**options)["seconds"] for _ in range(calls))
        timings.append({"config": config, "seconds": seconds})
        if best is None or seconds < best[1]:
            if best is not None:
                best[0].close()
            best = (worker, seconds)
        else:
            worker.close()
    best[0].timings = timings
    return best[0]


def _voluntary_switches():
    """Voluntary context switches of every thread of this process so far."""
    total = 0
    for status in glob.glob("/proc/self/task/*/status"):
        try:
            with open(status) as f:
                total += sum(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))
        except FileNotFoundError:  # a thread that ended meanwhile
            pass
    return total


def _load(ctranslate2, message):
    """The Translator, loaded on a thread that then exits (see the module's docstring)."""
    box = {}

    def load():
        try:
            box["translator"] = ctranslate2.Translator(message["path"], device="cpu",
                                                       compute_type=message["compute_type"], inter_threads=1,
                                                       intra_threads=message["intra_threads"])
        except Exception as error:  # raised again on the worker's own thread
            box["error"] = error

    thread = threading.Thread(target=load)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["translator"]


def _worker():
    import ctranslate2

    translator, source = None, None
    for line in sys.stdin:
        message = json.loads(line)
        try:
            if message["op"] == "load":
                translator = _load(ctranslate2, message)
                answer = {"version": ctranslate2.__version__, "compute_type": translator.compute_type,
                          "supported": sorted(ctranslate2.get_supported_compute_types("cpu"))}
            elif message["op"] == "source":
                source, answer = message["tokens"], {}
            elif message["op"] == "run":
                switches = _voluntary_switches()
                t0 = time.perf_counter()
                results = translator.translate_batch(source, **message["options"])
                seconds = time.perf_counter() - t0
                answer = {"seconds": seconds, "switches": _voluntary_switches() - switches,
                          "tokens": sum(len(r.hypotheses[0]) for r in results)}
                if message["hypotheses"]:
                    answer["hypotheses"] = [r.hypotheses[0] for r in results]
            elif message["op"] == "quit":
                print(json.dumps({}), flush=True)
                return
            else:
                answer = {"error": f"unknown op {message['op']!r}"}
        except Exception as error:  # reported to the parent, which raises it
            answer = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__" and sys.argv[1:] == ["--worker"]:
    _worker()
