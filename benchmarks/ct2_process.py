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
measured as a user who read its docs would run it; for a call of many batches timed for its throughput
(batches_in_parallel) each is also tried with inter_threads (the threads' batches run at once, a thread each:
CTranslate2's documented way to raise throughput, and what ctransformer's Translator does with its batches). A setting the CPU lacks is skipped and named: CTranslate2
refuses CT2_FORCE_CPU_ISA=AVX512 on a CPU without AVX-512 ("The CPU does not support AVX512", on an AVX2
Zen 1), so `missing_features` reads the CPU's flags first, and a setting CTranslate2 refuses for any other
reason (an error when the worker loads or runs) is closed and skipped too; `timings` names each with why.

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
        # CTranslate2 at its own defaults (not the OMP_WAIT_POLICY the benchmarks set for torch), plus `config`: its
        # CT2_* variables, and inter_threads (batches in parallel, the threads shared out: intra_threads each).
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY" and not k.startswith("CT2_")}
        self.config = dict(config or {})
        env.update(environment(self.config))
        inter = int(self.config.get("inter_threads", 1))
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)
        self.last_seconds = self.last_switches = None
        try:
            self.info = self._ask({"op": "load", "path": str(path), "compute_type": compute_type,
                                   "intra_threads": max(1, intra_threads // inter), "inter_threads": inter})
        except BaseException:  # a setting CTranslate2 refuses (or a load interrupted): no worker left behind
            self.kill()
            raise

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
            try:
                self._ask({"op": "quit"})
                self.proc.wait(timeout=30)
            except Exception:  # a worker that broke off or does not answer
                pass
        self.kill()

    def kill(self):
        """Ends the worker at once (one that refused its setting, or was stopped in the middle of a call by
        measure.deadline, whose next answer would be the one to that call) and closes its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:  # a line the dead worker never read
                pass

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


def configs(environ=os.environ):
    """The settings fastest() tries: CONFIGS, or, when ct's kernels are capped at a smaller CPU's level
    (level_cap.py), both backends with CTranslate2's ISA forced to that level (its own choice on this CPU
    would be a bigger one)."""
    import level_cap

    isa = level_cap.PEERS.get(level_cap.level(environ), {}).get("CT2_FORCE_CPU_ISA")
    if isa is None:
        return CONFIGS
    return [{"CT2_FORCE_CPU_ISA": isa}, {"CT2_USE_MKL": "1", "CT2_FORCE_CPU_ISA": isa}]
# The CPU flags (as /proc/cpuinfo names them) CTranslate2 checks before it takes a forced ISA: its
# cpu_supports_avx512() wants all five AVX-512 subsets below (src/cpu/cpu_info.cc); without them it refuses.
ISA_FLAGS = {"AVX512": ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"), "AVX2": ("avx2",),
             "AVX": ("avx",)}


def cpu_flags():
    """This CPU's feature flags (the "flags" line of /proc/cpuinfo), or None where there is none (not Linux,
    not x86): then no setting is skipped beforehand and CTranslate2's own refusal is caught instead.
    Tests replace it to pretend another CPU."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def missing_features(config, flags):
    """The flags that `config`'s CT2_FORCE_CPU_ISA needs and `flags` lacks; [] when the flags are unknown."""
    isa = config.get("CT2_FORCE_CPU_ISA")
    if flags is None or isa is None:
        return []
    return [flag for flag in ISA_FLAGS.get(isa.upper(), ()) if flag not in flags]


def environment(config):
    """The CT2_* variables of a setting (what a server of its own takes from it; inter_threads is the Translator's)."""
    return {k: v for k, v in config.items() if k.startswith("CT2_")}


def describe(config):
    return " ".join(f"{k}={v}" for k, v in config.items()) or "its defaults"


def fastest(path, compute_type, intra_threads, source, options, calls=3, limit=None, batches_in_parallel=False):
    """A CT2Process in the configuration (of configs()) whose median of `calls` timed calls (after one
    warm-up) is lowest for this source and these options; the others are closed. With batches_in_parallel (a
    call of several batches timed for its throughput), each configuration is tried with inter_threads too:
    intra_threads batches at once, a thread each (CTranslate2's documented way to raise throughput, as
    ctransformer's Translator takes its batches a thread each). Its `timings` holds
    each configuration's median, or why it has none: "skipped" (a setting the CPU lacks, or one CTranslate2
    refused) or "too_slow_s" (a call past `limit` seconds); each of those is also printed.
    RuntimeError when no configuration ran (measure.TooSlow when every one that ran was too slow)."""
    from measure import TooSlow

    best, timings, flags = None, [], cpu_flags()
    tried = configs()
    if batches_in_parallel and intra_threads > 1:
        tried = tried + [dict(c, inter_threads=str(intra_threads)) for c in tried]
    for config in tried:
        missing = missing_features(config, flags)
        if missing:  # CTranslate2 would refuse it; not worth a worker
            worker, entry = None, {"config": config, "skipped": "the CPU lacks " + ", ".join(missing)}
        else:
            worker, entry = _timed_config(path, compute_type, intra_threads, config, source, options, calls, limit)
        timings.append(entry)
        if worker is None:
            why = entry.get("skipped") or f"too slow (> {entry['too_slow_s']:g} s)"
            print(f"CTranslate2 {compute_type} with {describe(config)}: not timed, {why}", flush=True)
        elif best is None or entry["seconds"] < best[1]:
            if best is not None:
                best[0].close()
            best = (worker, entry["seconds"])
        else:
            worker.close()
    if best is None:
        ran = [t for t in timings if "skipped" not in t]
        if ran and all("too_slow_s" in t for t in ran):
            raise TooSlow(limit)
        raise RuntimeError("CTranslate2 ran in none of its settings: " +
                           "; ".join(f"{describe(t['config'])}: {t.get('skipped') or 'too slow'}" for t in timings))
    best[0].timings = timings
    return best[0]


def _timed_config(path, compute_type, intra_threads, config, source, options, calls, limit):
    """(worker, {"config", "seconds"}) for one configuration (fastest()), or (None, {"config", and why not})
    when CTranslate2 refused it or a call ran past `limit` seconds; such a worker is killed."""
    import statistics

    from measure import TooSlow, deadline

    worker = None
    try:
        worker = CT2Process(path, compute_type, intra_threads, config)  # a start and a load, not a call: no limit
        worker.set_source(source)
        with deadline(limit):
            worker.run(**options)  # the warm-up
        seconds = []
        for _ in range(calls):
            with deadline(limit):
                seconds.append(worker.run(**options)["seconds"])
        return worker, {"config": config, "seconds": statistics.median(seconds)}
    except TooSlow as slow:
        entry = {"config": config, "too_slow_s": slow.seconds}
    except Exception as error:  # CTranslate2 refused the setting (or broke off): the other settings still run
        entry = {"config": config, "skipped": f"CTranslate2 refused it: {error}"}
    if worker is not None:  # perhaps stopped mid-call: its next answer would be that call's
        worker.kill()
    return None, entry


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
                                                       compute_type=message["compute_type"],
                                                       inter_threads=message.get("inter_threads", 1),
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
