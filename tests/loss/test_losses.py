"""cross_entropy (ignore_index, reductions, label_smoothing) and kl_div (all reductions) against torch.

Tolerance: rtol 1e-5, atol 1e-6 for losses and gradients. Both sides compute a float32
log_softmax and sum it; ours sums in float64, torch in float32, which is within a few ulps for
these sizes. The gradients are p - q per element, no cancellation beyond an ulp.
"""
import numpy as np
import pytest
import torch

import ctransformer as ct
from helpers import assert_close, pair, rand
from upstream import backward_both
from kernel_levels import every_level

# Every test at each level's cross-entropy (kernels/simd/cross_entropy.cpp).
at_every_level = every_level("loops")

F = ct.functional
TF = torch.nn.functional

CE_CASES = [
    # (N, C, targets)
    (4, 5, [0, 4, 2, 2]),
    (1, 1, [0]),                    # one class: loss 0, gradient 0
    (1, 10, [7]),
    (6, 3, [1, -100, 0, 2, -100, 1]),  # default ignore_index rows
]


@pytest.mark.parametrize("n,c,targets", CE_CASES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1, 1.0])
def test_cross_entropy(n, c, targets, reduction, smoothing):
    x, tx = pair(rand((n, c), seed=1, scale=2.0))
    t = np.array(targets, dtype=np.int64)
    out = F.cross_entropy(x, t, reduction=reduction, label_smoothing=smoothing)
    tout = TF.cross_entropy(tx, torch.from_numpy(t), reduction=reduction, label_smoothing=smoothing)
    assert out.shape == tuple(tout.shape)
    assert_close(out, tout, rtol=1e-5, atol=1e-6, what="cross_entropy")
    backward_both(out, tout, seed=2)
    assert_close(x.grad, tx.grad, rtol=1e-5, atol=1e-6, what="cross_entropy grad")


@pytest.mark.parametrize("ignore_index", [0, 3, -1])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_ignore_index(ignore_index, reduction, smoothing):
    """Rows whose target is ignore_index add nothing and get zero gradient; 'mean' divides by the
    rest. The Transformer's padding index 0 is the usual case."""
    x, tx = pair(rand((8, 4), seed=3, scale=2.0))
    t = np.array([1, 0, 3, 2, 0, 3, 1, 2], dtype=np.int64)
    if ignore_index == -1:
        t[[2, 5]] = -1
    out = F.cross_entropy(x, t, ignore_index=ignore_index, reduction=reduction, label_smoothing=smoothing)
    tout = TF.cross_entropy(tx, torch.from_numpy(t), ignore_index=ignore_index, reduction=reduction,
                            label_smoothing=smoothing)
    assert_close(out, tout, rtol=1e-5, atol=1e-6, what="cross_entropy")
    backward_both(out, tout, seed=4)
    assert_close(x.grad, tx.grad, rtol=1e-5, atol=1e-6, what="cross_entropy grad")
    ignored = t == ignore_index
    assert (x.grad.numpy()[ignored] == 0).all()


def test_cross_entropy_every_row_ignored():
    """'mean' over zero rows is NaN in torch; 'sum' is 0; no gradient reaches any row."""
    x, tx = pair(rand((3, 4), seed=5))
    t = np.full(3, -100, dtype=np.int64)
    out = F.cross_entropy(x, t)
    tout = TF.cross_entropy(tx, torch.from_numpy(t))
    assert_close(out, tout, equal_nan=True, what="mean of nothing")
    total = F.cross_entropy(x, t, reduction="sum")
    assert total.item() == 0.0
    total.backward()
    assert (x.grad.numpy() == 0).all()


def test_cross_entropy_large_logits_are_stable():
    x, tx = pair(rand((3, 6), seed=6) * 1000)
    t = np.array([5, 0, 2], dtype=np.int64)
    out, tout = F.cross_entropy(x, t, label_smoothing=0.1), TF.cross_entropy(tx, torch.from_numpy(t), label_smoothing=0.1)
    assert_close(out, tout, rtol=1e-5, atol=1e-4, what="large logits")  # loss ~ 1e3: atol is 1e-7 relative
    backward_both(out, tout, seed=7)
    assert_close(x.grad, tx.grad, rtol=1e-5, atol=1e-6, what="large logits grad")


def kl_inputs(shape, seed, zeros=True):
    """Log-probabilities over the last dim, and a probability target with some exact zeros."""
    logits = rand(shape, seed=seed)
    target = np.exp(rand(shape, seed=seed + 1))
    if zeros:
        target[..., 0] = 0.0  # t = 0 contributes 0 (and no gradient to t), as torch's xlogy
    target = (target / target.sum(-1, keepdims=True)).astype(np.float32)
    log_probs = torch.log_softmax(torch.from_numpy(logits), -1).numpy()
    return log_probs, target


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides:UserWarning")
@pytest.mark.parametrize("shape", [(4, 5), (2, 3, 4), (1, 1), (3, 7)])
@pytest.mark.parametrize("reduction", ["sum", "batchmean", "mean", "none"])
@pytest.mark.parametrize("target_grad", [False, True])
def test_kl_div(shape, reduction, target_grad):
    lp_np, t_np = kl_inputs(shape, seed=8, zeros=shape[-1] > 1)
    lp, tlp = pair(lp_np)
    t, tt = pair(t_np, requires_grad=target_grad)
    out = F.kl_div(lp, t, reduction=reduction)
    tout = TF.kl_div(tlp, tt, reduction=reduction)
    assert out.shape == tuple(tout.shape)
    assert_close(out, tout, rtol=1e-5, atol=1e-6, what="kl_div")
    backward_both(out, tout, seed=9)
    assert_close(lp.grad, tlp.grad, rtol=1e-5, atol=1e-6, what="kl_div grad input")
    if target_grad:
        # d/dt [t (log t - x)] = log t + 1 - x is -inf at t = 0: torch 2.13 returns NaN there (its
        # composite xlogy backward computes 0/0), ours returns 0 by the documented convention of
        # kl_div.hpp (a zero target is a constant of the label-smoothing loss). Elsewhere: torch.
        positive = t_np > 0
        assert_close(t.grad.numpy()[positive], tt.grad.numpy()[positive], rtol=1e-5, atol=1e-6,
                     what="kl_div grad target")
        assert (t.grad.numpy()[~positive] == 0).all() and np.isnan(tt.grad.numpy()[~positive]).all()
    else:
        assert t.grad is None


def test_kl_div_with_a_numpy_target():
    """jadore801120's label-smoothing loss (training the post-norm Transformer) passes a constant target: a
    NumPy array works."""
    lp_np, t_np = kl_inputs((3, 4), seed=10)
    lp, tlp = pair(lp_np)
    out = F.kl_div(lp, t_np, reduction="batchmean")
    tout = TF.kl_div(tlp, torch.from_numpy(t_np), reduction="batchmean")
    assert_close(out, tout, rtol=1e-5, atol=1e-6, what="kl_div")
    backward_both(out, tout, seed=11)
    assert_close(lp.grad, tlp.grad, rtol=1e-5, atol=1e-6, what="kl_div grad")
