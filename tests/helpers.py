"""Shared test helpers: random inputs, NumPy/torch/ctransformer conversion, closeness checks."""
import numpy as np
import torch

import ctransformer as ct


def rand(shape, seed=0, scale=1.0):
    """A float32 array of standard normal draws times `scale`, reproducible by `seed`."""
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def pair(array, requires_grad=True):
    """The same float32 data as a ctransformer tensor and a torch tensor, both leaves."""
    array = np.ascontiguousarray(array, dtype=np.float32)
    return ct.tensor(array, requires_grad=requires_grad), torch.tensor(array, requires_grad=requires_grad)


def to_numpy(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    if isinstance(x, ct.Tensor):
        return x.numpy()
    return np.asarray(x)


def assert_close(actual, expected, rtol=1e-5, atol=1e-6, equal_nan=False, what=""):
    """|actual - expected| <= atol + rtol * |expected| elementwise, shapes equal."""
    a, e = to_numpy(actual), to_numpy(expected)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != expected {e.shape}"
    np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan, err_msg=what)


def assert_releases_gil(call, attempts=10):
    """call() lets go of the GIL while it runs: a second thread counts meanwhile.

    The interpreter's switch interval is set far past any call for the test, so no thread is ever made to give the
    GIL up: the counting thread (which hands it back at each count, sleep(0)) can count during call() only if
    call() itself releases the GIL. Held throughout, the count during the call is exactly 0 on any machine; released,
    the counter runs as soon as the OS schedules its thread, which a busy machine may not do within one call, so the
    call is made again, up to `attempts` times."""
    import sys
    import threading
    import time

    counts, stop = [0], threading.Event()

    def count():
        while not stop.is_set():
            counts[0] += 1
            time.sleep(0)   # hands the GIL back

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    counter = threading.Thread(target=count)
    counter.start()
    try:
        during = []
        for _ in range(attempts):
            before = counts[0]
            call()
            during.append(counts[0] - before)
            if during[-1] > 0:
                return
    finally:
        stop.set()
        counter.join()
        sys.setswitchinterval(interval)
    raise AssertionError(f"no other thread ran during any of {attempts} calls (counts {during}): the GIL was held")
