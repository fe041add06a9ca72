"""Two Python threads, each training its own small GPT at the same time (make sanitize runs this
under ThreadSanitizer, scripts/sanitize.sh).

Long C++ calls release the GIL, so both threads are inside the core together: in the thread pool,
the caching allocator, the grad-mode flag and the kernels. Each model must end exactly where it
ends when trained alone (bitwise: the same operations in the same order on the same numbers; the
pool's split of a task does not depend on who else is running), so any cross-talk between the two
shows up as a wrong number here, and as a race report under TSan. No torch: this file must run
with `--noconftest` under TSan, where torch's own OpenMP threads would only add noise.
"""
import threading

import numpy as np
import pytest

import ctransformer as ct

pytestmark = pytest.mark.threads   # threads, the serving engine or the server: make test-stress runs it under load

CFG = dict(vocab_size=40, max_seq_len=12, n_layers=2, d_model=32, n_head=4, d_inner=64)
STEPS = 12


def make(seed):
    ct.manual_seed(seed)  # the RNG is global: models are built before the threads start
    model = ct.nn.GPT(**CFG, dropout=0.0)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, CFG["vocab_size"], (4, CFG["max_seq_len"]))
    targets = rng.integers(1, CFG["vocab_size"], (4, CFG["max_seq_len"]))
    return model, idx, targets


def train(model, idx, targets, losses):
    opt = ct.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    for _ in range(STEPS):
        _, loss = model(idx, targets)
        opt.zero_grad()
        loss.backward()
        ct.optim.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())


def test_two_threads_each_training_its_own_model_match_training_alone():
    alone = []
    for seed in (1, 2):
        model, idx, targets = make(seed)
        losses = []
        train(model, idx, targets, losses)
        alone.append((losses, {k: v.copy() for k, v in model.state_dict().items()}))

    jobs = [make(seed) for seed in (1, 2)]
    results = [[], []]
    errors = []

    def run(i):
        try:
            train(*jobs[i], results[i])
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
        assert not t.is_alive(), "a training thread hung"
    assert not errors, errors
    for i, (losses, state) in enumerate(alone):
        assert results[i] == losses, f"model {i}: losses differ from training alone"
        assert losses[-1] < 0.8 * losses[0], losses  # it did learn: the check is not vacuous
        for name, value in jobs[i][0].state_dict().items():
            assert np.array_equal(value, state[name]), f"model {i}: {name} differs from training alone"
