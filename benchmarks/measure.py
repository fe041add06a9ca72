"""Timing, OpenBLAS sgemm rates and peak memory, shared by the benchmark cases.

Timing: the sides run interleaved (ct, torch, ct, torch, ...) after a warm-up, and each side's median
is kept, so a burst of load from elsewhere on the machine hits both. An engine in another process
(CTranslate2, ct2_process.py) is one more callable whose `last_seconds` is its own time.

Each engine's turn is a burst: `gap` seconds of pause, then (for calls under `short_s`) one untimed
call and `burst` timed ones back to back. Engines may leave threads spinning after a call (Intel
OpenMP's KMP_BLOCKTIME is 200 ms; ct's pool spins 30 us, OpenBLAS runs on one thread under it; torch's
OpenMP runs PASSIVE here): the pause keeps the next engine from sharing its 2 cores with the last
one's spinners. And an engine whose threads have gone to sleep pays for waking them in its first call (CTranslate2's tiny batch-1 decode: 3.5 ms
back to back, 12 ms after a pause): the untimed call takes that, as a server's steady state would.

A call may be given a time limit (`limit`, seconds): past it the call is stopped (deadline()) and raises
TooSlow, so an engine far slower on this CPU than the suite was sized for (torch's bf16 autocast without
AVX512_BF16: 15x its float32 step on a Zen 1) is reported as too slow instead of holding up the run.
"""
import contextlib
import ctypes
import ctypes.util
import os
import signal
import statistics
import threading
import time

import numpy as np
from ctransformer._cpu_check import cpu_model  # noqa: F401 (measure.cpu_model: the benchmarks' CPU name)


GAP_S = 0.3
BURST = 3
SHORT_S = 0.5


class TooSlow(Exception):
    """A call that ran past its time limit (deadline()); `seconds` is the limit."""

    def __init__(self, seconds):
        super().__init__(f"too slow (> {seconds:g} s)")
        self.seconds = seconds


@contextlib.contextmanager
def deadline(seconds):
    """Raises TooSlow inside the block once it has run `seconds` (None or 0: no limit). By SIGALRM, which
    only the main thread can take (elsewhere: no limit). Python runs the handler between bytecodes, so a
    call stops at its next return from C++ (a torch kernel) or when its blocking read is interrupted (a
    CTranslate2 worker's answer): the engine is left in the middle of a call, and the caller drops it."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise TooSlow(seconds)
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def timed(fn, gap=0.0, limit=None):
    """Seconds of one call of `fn`, after `gap` seconds of pause (its own `last_seconds` when it has one).
    TooSlow when the call runs past `limit` seconds (the timer is set outside the timed span)."""
    if gap:
        time.sleep(gap)
    with deadline(limit):
        t0 = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - t0
    own = getattr(fn, "last_seconds", None)
    seconds = own if own is not None else elapsed
    if limit and max(seconds, elapsed) > limit:  # the timer could not be set (not the main thread) or was swallowed
        raise TooSlow(limit)
    return seconds


def turn(fn, last_s, gap=GAP_S, burst=BURST, short_s=SHORT_S, limit=None):
    """One engine's turn: after the pause, a burst of warm calls for a short call (its previous time
    `last_s` under short_s), else one call; the list of timed seconds. `limit`: as timed()'s, per call."""
    if last_s is not None and last_s < short_s:
        timed(fn, gap, limit)
        return [timed(fn, 0.0, limit) for _ in range(burst)]
    return [timed(fn, gap, limit)]


def interleaved(fns, repeats, warmup, gap=GAP_S, first=None, limit=None, dropped=None):
    """Median seconds of each callable in `fns` (a dict), taking turns `repeats` times (turn()).
    `first`: each one's time from an earlier call, which decides whether its turns are bursts.
    `limit`: seconds one call may take (timed()). `dropped`: when given, a dict that takes each engine whose
    call raised (TooSlow, or any error) as name -> the exception; that engine leaves the rotation and has no
    median, and the others go on. Without it the error propagates."""
    live = dict(fns)

    def attempt(name, call):
        try:
            return call()
        except Exception as error:
            if dropped is None:
                raise
            dropped[name] = error
            del live[name]
            return None
    for _ in range(warmup):
        for name, fn in list(live.items()):
            attempt(name, lambda: timed(fn, 0.0, limit))
    times = {name: [] for name in fns}
    last = dict(first or {})
    for _ in range(repeats):
        for name, fn in list(live.items()):
            got = attempt(name, lambda: turn(fn, last.get(name), gap, limit=limit))
            if got is not None:
                times[name] += got
                last[name] = times[name][-1]
    return {name: statistics.median(times[name]) for name in live}, times


# --- OpenBLAS sgemm: the library ctransformer links (or another one), called directly on preallocated buffers ----
class OpenBLAS:
    """An OpenBLAS shared library through ctypes, its symbols with or without a prefix (the
    scipy-openblas32 wheel's are scipy_cblas_sgemm, ...). By default: the one ctransformer runs on."""

    def __init__(self, path=None, prefix=None):
        if path is None:
            import ctransformer as ct  # loads the library into the process
            blas = ct.build_info()["blas"]
            path, prefix = blas["library"], "scipy_" if blas["source"] == "scipy-openblas32" else ""
        self.path, self.prefix = path, prefix or ""
        self.lib = ctypes.CDLL(path)
        self.sgemm = self.fn("cblas_sgemm")
        self.sgemm.restype = None
        self.sgemm.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                                    ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
        self.fn("openblas_set_num_threads").argtypes = [ctypes.c_int]
        for name in ("openblas_get_config", "openblas_get_corename"):
            self.fn(name).restype = ctypes.c_char_p

    def fn(self, name):
        return getattr(self.lib, self.prefix + name)

    def set_threads(self, n):
        self.fn("openblas_set_num_threads")(n)

    def config(self):
        return self.fn("openblas_get_config")().decode()

    def corename(self):
        return self.fn("openblas_get_corename")().decode()


def gemm_mix_rate(shapes, make_call, min_time=0.15):
    """(GFLOP/s over `shapes`, per-shape rates) for a product: `shapes` is a list of (m, n, k, trans_a,
    trans_b, count), make_call(m, n, k, ta, tb, a, b) returns the call to time on operands a (k, m or m, k)
    and b (n, k or k, n). Each shape is called once untimed, then until min_time is covered; its median
    single call counts `count` times: the flops of all over the time they take (the step's matmul mix)."""
    total_flops = total_time = 0.0
    per_shape = []
    for m, n, k, ta, tb, count in shapes:
        a = np.random.default_rng(0).standard_normal((k, m) if ta else (m, k)).astype(np.float32)
        b = np.random.default_rng(1).standard_normal((n, k) if tb else (k, n)).astype(np.float32)
        call = make_call(m, n, k, ta, tb, a, b)
        call()
        best = []
        while True:
            t0 = time.perf_counter()
            call()
            best.append(time.perf_counter() - t0)
            if sum(best) > min_time and len(best) >= 5:
                break
        t = statistics.median(best)
        flops = 2.0 * m * n * k
        per_shape.append({"shape": [m, n, k], "trans": [bool(ta), bool(tb)], "gflops": flops / t / 1e9})
        total_flops += flops * count
        total_time += t * count
    return total_flops / total_time / 1e9, per_shape


def sgemm_rate(shapes, threads=2, min_time=0.15, blas=None):
    """GFLOP/s of OpenBLAS sgemm (its own `threads`-thread code) over `shapes` (gemm_mix_rate).
    blas: an OpenBLAS (default: ctransformer's)."""
    lib = blas or OpenBLAS()
    if blas is None:
        import ctransformer as ct
        ct.get_num_threads()  # ct pins OpenBLAS to one thread on first use (it splits products itself) ...
    lib.set_threads(threads)  # ... so OpenBLAS's own threading is switched on for this measure

    def make_call(m, n, k, ta, tb, a, b):
        c = np.zeros((m, n), np.float32)
        args = (101, 112 if ta else 111, 112 if tb else 111, m, n, k, 1.0, a.ctypes.data, a.shape[1],
                b.ctypes.data, b.shape[1], 0.0, c.ctypes.data, n)
        return lambda arrays=(a, b, c): lib.sgemm(*args)  # arrays: args holds only their addresses
    gflops, per_shape = gemm_mix_rate(shapes, make_call, min_time)
    lib.set_threads(1)  # back to what ct expects
    time.sleep(0.3)  # let OpenBLAS's workers stop spinning before anything else is timed
    return {"gflops": gflops, "threads": threads, "library": lib.path, "config": lib.config(),
            "core": lib.corename(), "shapes": per_shape}


def bf16_gemm_rate(shapes, threads=2, min_time=0.15):
    """GFLOP/s of ctransformer's bf16 GEMM (ct.amp.gemm_bf16: bf16 operands, fp32 accumulation) over
    `shapes` (gemm_mix_rate), written in place (out=) so no call pays for fresh pages."""
    import ctransformer as ct
    previous = ct.get_num_threads()
    ct.set_num_threads(threads)

    def make_call(m, n, k, ta, tb, a, b):
        a16, b16, c = ct.amp.round_to_bf16(a), ct.amp.round_to_bf16(b), np.zeros((m, n), np.float32)
        return lambda: ct.amp.gemm_bf16(a16, b16, bool(ta), bool(tb), out=c)
    gflops, per_shape = gemm_mix_rate(shapes, make_call, min_time)
    ct.set_num_threads(previous)
    return {"gflops": gflops, "threads": threads, "kernel": ct.amp.bf16_kernel(), "shapes": per_shape}


def linear_gemms(rows, d_in, d_out, count=1):
    """The three products of a Linear (forward, dX, dW) in ctransformer's BLAS calls."""
    return [(rows, d_out, d_in, False, True, count),   # y = x W^T
            (rows, d_in, d_out, False, False, count),  # dx = g W
            (d_out, d_in, rows, True, False, count)]   # dW = g^T x


# --- peak memory ----------------------------------------------------------------------------------
def result_path(folder, stem):
    """folder/stem.json, or stem_2.json, stem_3.json, ... when taken: two runs finishing in the same minute
    (a date stamp to the minute) must not overwrite each other."""
    path, n = os.path.join(folder, stem + ".json"), 2
    while os.path.exists(path):
        path, n = os.path.join(folder, f"{stem}_{n}.json"), n + 1
    return path


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def hwm_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def reset_hwm():
    """Linux: writing 5 to clear_refs resets the peak RSS (VmHWM) to the current RSS."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False
