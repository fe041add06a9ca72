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


def assert_releases_gil(call):
    """Runs call() on a worker thread while this thread keeps asking for the interpreter: if the long
    C++ call releases the GIL, this thread's longest wait stays far below the call's duration."""
    import threading
    import time

    span = {}

    def work():
        start = time.perf_counter()
        call()
        span["call"] = time.perf_counter() - start

    worker = threading.Thread(target=work)
    last, longest = time.perf_counter(), 0.0
    worker.start()
    while worker.is_alive():
        time.sleep(0.0005)
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
    worker.join()
    assert span["call"] > 0.05
    assert longest < 0.5 * span["call"], f"waited {longest:.3f}s during a {span['call']:.3f}s call"
