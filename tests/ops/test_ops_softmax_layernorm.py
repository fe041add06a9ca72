"""softmax, log_softmax (several dims) and layer_norm (with and without weight / bias) against torch.

Tolerances: softmax / log_softmax rtol 1e-5, atol 1e-6 (exp and log of float32, the normaliser
summed in a different order). layer_norm rtol 1e-5, atol 1e-6: the output is (x - mean) * rstd,
so outputs near 0 carry the rounding of mean and rstd, of order eps32 * |x| / std, and the input
gradient is a difference of row means (dxhat - mean(dxhat) - xhat * mean(dxhat xhat)).
One exception, D = 1: the exact xhat and input gradient are 0 (we give 0), torch returns rounding
noise instead, because its backward formula (a dy + b x + c, with b ~ rstd^3 = 3e7) does not cancel
exactly: measured 1.53e-5 with the weight of this test on x86-64 (torch 2.13), 3.05e-5 on aarch64
(torch 2.10 under qemu, make test-aarch64). So for D = 1 the input gradient is checked against the
exact answer, 0, and not against torch's noise; the weight gradient (exactly 0 too, xhat being 0) keeps
torch as the reference with atol 2e-5.
"""
import numpy as np
import pytest
import torch

import ctransformer as ct
from helpers import assert_close, pair, rand
from kernel_levels import every_level
from upstream import backward_both

# Every test at each level's SIMD loops (kernels/simd/softmax.cpp, layer_norm.cpp).
at_every_level = every_level("loops")

F = ct.functional

SOFTMAX_CASES = [
    ((5,), 0), ((5,), -1), ((1,), 0),
    ((3, 4), 0), ((3, 4), 1), ((3, 4), -1), ((3, 4), -2),
    ((2, 3, 4), 0), ((2, 3, 4), 1), ((2, 3, 4), -1),
    ((2, 1, 5), 1), ((1, 1), -1), ((2, 3, 4, 5), 2),
]


@pytest.mark.parametrize("shape,dim", SOFTMAX_CASES)
@pytest.mark.parametrize("log", [False, True])
def test_softmax_and_log_softmax(shape, dim, log):
    x, tx = pair(rand(shape, seed=1, scale=3.0))
    if log:
        out, tout = F.log_softmax(x, dim), torch.log_softmax(tx, dim)
    else:
        out, tout = F.softmax(x, dim), torch.softmax(tx, dim)
    assert_close(out, tout, rtol=1e-5, atol=1e-6, what="forward")
    backward_both(out, tout, seed=2)
    assert_close(x.grad, tx.grad, rtol=1e-5, atol=1e-6, what="grad")


def test_softmax_methods_and_large_logits():
    """Shifted by the max: logits of 1e4 neither overflow nor lose the answer."""
    x_np = rand((4, 6), seed=3) + np.float32(1e4)
    x_np[0, 0] = -np.inf  # a -inf logit gets probability 0 and gradient 0
    x, tx = pair(x_np)
    out, tout = x.softmax(-1) * 2.0 + x.log_softmax(0), tx.softmax(-1) * 2.0 + tx.log_softmax(0)
    assert_close(out, tout, rtol=1e-5, atol=1e-6, what="forward")
    backward_both(out, tout, seed=4)
    assert_close(x.grad, tx.grad, rtol=1e-5, atol=1e-6, what="grad")


def test_softmax_of_an_all_minus_inf_row_is_nan_like_torch():
    x_np = rand((3, 4), seed=5)
    x_np[1] = -np.inf
    x, tx = pair(x_np)
    out, tout = F.softmax(x, -1), torch.softmax(tx, -1)
    assert_close(out, tout, rtol=1e-5, atol=1e-6, equal_nan=True, what="forward")
    assert np.isnan(out.numpy()[1]).all() and np.isfinite(out.numpy()[[0, 2]]).all()
    backward_both(out, tout, seed=6)
    assert_close(x.grad, tx.grad, rtol=1e-5, atol=1e-6, equal_nan=True, what="grad")


LN_SHAPES = [(4, 8), (2, 3, 16), (1, 1, 5), (3, 1), (7,), (2, 2, 2, 32)]


@pytest.mark.parametrize("shape", LN_SHAPES)
@pytest.mark.parametrize("affine", ["both", "weight", "bias", "none"])
def test_layer_norm(shape, affine):
    D = shape[-1]
    x, tx = pair(rand(shape, seed=7, scale=2.0) + 0.5)
    w = tw = b = tb = None
    if affine in ("both", "weight"):
        w, tw = pair(rand((D,), seed=8) + 1.0)
    if affine in ("both", "bias"):
        b, tb = pair(rand((D,), seed=9))
    out = F.layer_norm(x, w, b, 1e-5)
    tout = torch.nn.functional.layer_norm(tx, (D,), tw, tb, 1e-5)
    assert_close(out, tout, rtol=1e-5, atol=1e-6, what="layer_norm forward")
    backward_both(out, tout, seed=10)
    atol_d1 = 2e-5 if D == 1 else 1e-6  # see the module docstring
    # D = 1: the exact input gradient is 0 (module docstring); torch's is rounding noise of up to 3e-5.
    expected_grad = np.zeros(shape, np.float32) if D == 1 else tx.grad
    assert_close(x.grad, expected_grad, rtol=1e-5, atol=1e-6, what="layer_norm grad input")
    if w is not None:
        assert_close(w.grad, tw.grad, rtol=1e-5, atol=atol_d1, what="layer_norm grad weight")
    if b is not None:
        assert_close(b.grad, tb.grad, rtol=1e-5, atol=1e-6, what="layer_norm grad bias")


@pytest.mark.parametrize("eps", [1e-6, 1e-5, 1e-1])
def test_layer_norm_eps_and_keyword_arguments(eps):
    """eps enters as sqrt(var + eps); rows of small variance show it (tolerances as above)."""
    x, tx = pair(rand((3, 6), seed=11, scale=0.05))
    w, tw = pair(rand((6,), seed=12))
    out = F.layer_norm(x, weight=w, eps=eps)
    tout = torch.nn.functional.layer_norm(tx, (6,), weight=tw, eps=eps)
    assert_close(out, tout, rtol=1e-5, atol=1e-6, what="forward")
    backward_both(out, tout, seed=13)
    assert_close(x.grad, tx.grad, rtol=1e-5, atol=1e-6, what="grad input")
    assert_close(w.grad, tw.grad, rtol=1e-5, atol=1e-6, what="grad weight")


def test_layer_norm_constant_row():
    """A constant row normalises to 0 (output = bias) and its input gradient is 0, as torch."""
    x_np = np.full((2, 4), 3.0, np.float32)
    x, tx = pair(x_np)
    w, tw = pair(rand((4,), seed=14))
    b, tb = pair(rand((4,), seed=15))
    out = F.layer_norm(x, w, b)
    tout = torch.nn.functional.layer_norm(tx, (4,), tw, tb)
    assert_close(out, tout, rtol=1e-6, atol=1e-6, what="forward")
    backward_both(out, tout, seed=16)
    assert_close(x.grad, tx.grad, rtol=1e-5, atol=1e-6, what="grad input")
    assert_close(w.grad, tw.grad, rtol=1e-6, atol=1e-6, what="grad weight")
    assert_close(b.grad, tb.grad, rtol=1e-6, atol=1e-6, what="grad bias")


def test_log_softmax_keeps_full_precision_far_from_zero():
    # Found by tests/fuzz: x - (max + lse) rounded at 512's magnitude (-0.693176 for log 1/2).
    # (x - max) - lse is exact here, as torch's is: |d| <= 1 ulp of the result.
    x = np.full((3, 2), 512.0, np.float32)
    x[1] = [-4096.0, -4096.0]
    x[2] = [1e6, 1e6 + 1]
    out = F.log_softmax(ct.tensor(x), -1).numpy()
    expected = torch.log_softmax(torch.from_numpy(x), -1).numpy()
    np.testing.assert_allclose(out, expected, rtol=2 ** -23, atol=0)
