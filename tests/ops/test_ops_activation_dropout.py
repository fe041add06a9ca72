"""relu, gelu (tanh approximation) and dropout.

relu and gelu are compared with torch (relu exactly; gelu to rtol 1e-5, atol 1e-6: both sides
evaluate the same float32 formula, but torch's vectorised tanh differs from libm's by an ulp or
two, and 1 + tanh(u) loses relative accuracy where gelu(x) is tiny, hence the atol).
Dropout cannot match torch's random stream, so its tests are statistical and structural.
"""
import numpy as np
import pytest
import torch

import ctransformer as ct
from helpers import assert_close, pair, rand
from upstream import backward_both, upstream
from kernel_levels import every_level

# Every test at each level's GELU (kernels/simd/activation.cpp).
at_every_level = every_level("loops")

F = ct.functional


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 5), (2, 3, 4)])
def test_relu(shape):
    """Exact: relu copies or zeroes, its gradient passes or blocks g (rtol 0)."""
    x_np = rand(shape, seed=1)
    x_np.flat[0] = 0.0  # torch's relu'(0) = 0; so must ours be
    x, tx = pair(x_np)
    out, tout = F.relu(x), torch.relu(tx)
    assert_close(out, tout, rtol=0, atol=0, what="relu forward")
    backward_both(out, tout, seed=2)
    assert_close(x.grad, tx.grad, rtol=0, atol=0, what="relu grad")


def test_relu_method():
    x, tx = pair(rand((4, 4), seed=3))
    out, tout = x.relu(), tx.relu()
    backward_both(out, tout, seed=4)
    assert_close(x.grad, tx.grad, rtol=0, atol=0, what="Tensor.relu grad")


@pytest.mark.parametrize("shape,scale", [((1,), 1.0), ((3, 5), 1.0), ((2, 3, 4), 3.0), ((64,), 6.0)])
def test_gelu_tanh(shape, scale):
    x, tx = pair(rand(shape, seed=5, scale=scale))
    out, tout = F.gelu(x), torch.nn.functional.gelu(tx, approximate="tanh")
    assert_close(out, tout, rtol=1e-5, atol=1e-6, what="gelu forward")
    backward_both(out, tout, seed=6)
    assert_close(x.grad, tx.grad, rtol=1e-5, atol=1e-6, what="gelu grad")


def test_gelu_is_the_tanh_approximation_not_erf():
    """The two GELUs differ by ~1e-4 around |x| = 2: ours must be the tanh one."""
    x = np.linspace(-3, 3, 61, dtype=np.float32)
    ours = F.gelu(ct.tensor(x)).numpy()
    erf = torch.nn.functional.gelu(torch.from_numpy(x)).numpy()
    tanh = torch.nn.functional.gelu(torch.from_numpy(x), approximate="tanh").numpy()
    assert np.abs(ours - tanh).max() < 1e-6 < np.abs(ours - erf).max()


# ---- dropout -------------------------------------------------------------------------------

N = 200_000  # elements per statistical test: the zeroed fraction has std sqrt(p(1-p)/N) <= 0.0012


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_zeroes_a_fraction_p_and_scales_the_rest(p):
    """Zeroed fraction within 6 standard deviations of p; survivors are exactly x / (1 - p)
    (as torch, the multiplier is computed once in float32: rtol 1e-6)."""
    ct.manual_seed(0)
    x_np = np.abs(rand((N,), seed=7)) + 0.1  # no zeros in the input, so zeros mean dropped
    out = F.dropout(ct.tensor(x_np), p=p, training=True).numpy()
    dropped = out == 0
    tol = 6 * np.sqrt(p * (1 - p) / N)
    assert abs(dropped.mean() - p) < tol
    np.testing.assert_allclose(out[~dropped], x_np[~dropped] * np.float32(1 / (1 - p)), rtol=1e-6)


def test_dropout_keeps_the_expectation():
    """E[dropout(x)] = x: the mean of dropout(ones) is 1 within 6 standard deviations."""
    ct.manual_seed(1)
    p = 0.3
    out = F.dropout(ct.ones((N,)), p=p).numpy()
    std = np.sqrt(p / (1 - p) / N)
    assert abs(out.mean() - 1.0) < 6 * std


def test_dropout_mask_is_not_a_pattern():
    """Neighbouring elements are dropped independently: the joint rate of two adjacent
    drops is p^2 within 6 standard deviations."""
    ct.manual_seed(2)
    p = 0.5
    z = F.dropout(ct.ones((N,)), p=p).numpy() == 0
    both = (z[:-1] & z[1:]).mean()
    assert abs(both - p * p) < 6 * np.sqrt(p * p * (1 - p * p) / N)


@pytest.mark.parametrize("p", [0.2, 0.7])
def test_dropout_backward_uses_the_forward_mask(p):
    """grad = g * (0 or 1/(1-p)) at exactly the positions the forward kept (rtol 1e-6)."""
    ct.manual_seed(3)
    x_np = np.abs(rand((50, 40), seed=8)) + 0.1
    x = ct.tensor(x_np, requires_grad=True)
    out = F.dropout(x, p=p)
    kept = out.numpy() != 0
    g = upstream((50, 40), seed=9)
    out.backward(ct.tensor(g))
    expected = np.where(kept, g * np.float32(1 / (1 - p)), 0.0)
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-6, atol=0)
    # and out / x is the same multiplier
    np.testing.assert_allclose(out.numpy(), np.where(kept, x_np * np.float32(1 / (1 - p)), 0), rtol=1e-6)


@pytest.mark.parametrize("p,training", [(0.5, False), (0.0, True), (0.0, False)])
def test_dropout_identity_when_not_training_or_p_zero(p, training):
    """Exact identity in value and gradient (rtol 0)."""
    x_np = rand((6, 7), seed=10)
    x = ct.tensor(x_np, requires_grad=True)
    out = F.dropout(x, p=p, training=training)
    np.testing.assert_array_equal(out.numpy(), x_np)
    g = upstream((6, 7), seed=11)
    out.backward(ct.tensor(g))
    np.testing.assert_array_equal(x.grad.numpy(), g)


def test_dropout_p_one_gives_zeros_and_zero_grad():
    x = ct.tensor(rand((5, 5), seed=12), requires_grad=True)
    out = F.dropout(x, p=1.0)
    np.testing.assert_array_equal(out.numpy(), np.zeros((5, 5), np.float32))
    out.backward(ct.tensor(upstream((5, 5), seed=13)))
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros((5, 5), np.float32))


def test_manual_seed_makes_dropout_reproducible():
    x = ct.tensor(rand((100, 10), seed=14))
    ct.manual_seed(123)
    a = F.dropout(x, p=0.5).numpy().copy()
    b = F.dropout(x, p=0.5).numpy().copy()
    ct.manual_seed(123)
    c = F.dropout(x, p=0.5).numpy().copy()
    d = F.dropout(x, p=0.5).numpy().copy()
    np.testing.assert_array_equal(a, c)
    np.testing.assert_array_equal(b, d)
    assert not np.array_equal(a, b)  # the stream moves on between calls
    ct.manual_seed(124)
    assert not np.array_equal(F.dropout(x, p=0.5).numpy(), a)
