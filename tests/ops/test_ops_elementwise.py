"""add / sub / mul / div / scale and the Python operators, with NumPy broadcasting, against torch.

Tolerance: a single float32 operation per element is correctly rounded on both sides, so the
forward is exact up to the last ulp (rtol 1e-6). Gradients of broadcast inputs are sums over the
broadcast dimensions, whose order may differ from torch's: rtol 1e-5, atol 1e-6.
Every test runs at each kernel level this CPU has (the loops are kernels/simd/arithmetic.cpp's).
"""
import numpy as np
import pytest
import torch

import ctransformer as ct
from helpers import assert_close, pair, rand
from kernel_levels import every_level
from upstream import backward_both

F = ct.functional
at_every_level = every_level("loops")

SHAPES = [
    ((3, 4), (3, 4)),          # same shape, non-square
    ((1,), (1,)),              # length 1
    ((2, 3, 4), (4,)),         # trailing vector
    ((2, 1, 4), (3, 1)),       # both sides broadcast
    ((5, 1), (1, 6)),          # outer-product style
    ((1,), (2, 3)),            # a one-element tensor against a matrix
    ((2, 3, 1, 5), (3, 4, 1)),  # rank 4 against rank 3
]
LARGE = [
    # Large enough to be split between threads (32,768 elements a share), rows not a multiple of any
    # vector's width: the same shape, and b repeated over a's rows (a bias, a position table).
    ((3, 70, 401), (3, 70, 401)),
    ((3, 70, 401), (70, 401)),
    ((300, 301), (301,)),
]


U = 2.0 ** -24  # float32's unit roundoff


def reduce_to(x, shape):
    """x (float64) summed over the dimensions that broadcasting added or stretched to reach x's shape."""
    lead = x.ndim - len(shape)
    x = x.sum(axis=tuple(range(lead))) if lead else x
    return x.sum(axis=tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1), keepdims=True)


def sum_bound(abs_terms, shape):
    """How far two float32 sums of the same terms, in any two orders, may lie apart: each is within
    (n - 1) u sum|term| of the exact sum (recursive summation; every other order is tighter), n the terms
    per element of `shape`."""
    n = abs_terms.size // int(np.prod(shape))
    return 2 * max(n - 1, 0) * U * reduce_to(abs_terms, shape)


def assert_grad(actual, expected, abs_terms, what):
    """A gradient summed over broadcast dimensions: rtol 1e-5, plus the summation-order bound, so a sum
    that cancels to near zero is not held to 1e-6."""
    bound = sum_bound(abs_terms, expected.shape) + 1e-6
    diff = np.abs(actual.numpy().astype(np.float64) - expected.detach().numpy())
    excess = diff - (bound + 1e-5 * np.abs(expected.detach().numpy()))
    assert excess.max() <= 0, f"{what}: off by {diff.max():.3g}, bound exceeded by {excess.max():.3g}"


def away_from_zero(a):
    """Divisors kept in |b| >= 0.5 so 1/b and a/b^2 stay well conditioned."""
    return np.where(a >= 0, a + 0.5, a - 0.5).astype(np.float32)


OPS = {
    "add": (F.add, torch.add),
    "sub": (F.sub, torch.sub),
    "mul": (F.mul, torch.mul),
    "div": (F.div, torch.div),
}


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize("sa,sb", SHAPES + LARGE)
def test_binary_op_forward_and_grads(name, sa, sb):
    ct_fn, torch_fn = OPS[name]
    a_np, b_np = rand(sa, seed=1), rand(sb, seed=2)
    if name == "div":
        b_np = away_from_zero(b_np)
    a, ta = pair(a_np)
    b, tb = pair(b_np)
    out, tout = ct_fn(a, b), torch_fn(ta, tb)
    assert_close(out, tout, rtol=1e-6, atol=0, what=f"{name} forward")
    g = backward_both(out, tout, seed=3).astype(np.float64)
    a64 = np.broadcast_to(a_np, g.shape).astype(np.float64)
    b64 = np.broadcast_to(b_np, g.shape).astype(np.float64)
    da = {"add": 1, "sub": 1, "mul": b64, "div": 1 / b64}[name]  # |d(a op b)/da| and /db per element
    db = {"add": 1, "sub": 1, "mul": a64, "div": a64 / b64 ** 2}[name]
    assert_grad(a.grad, ta.grad, np.abs(g * da), f"{name} grad input")
    assert_grad(b.grad, tb.grad, np.abs(g * db), f"{name} grad other")


@pytest.mark.parametrize("sa,sb", SHAPES)
def test_python_operators(sa, sb):
    """+ - * / between tensors and unary -, as torch's operators (same tolerances as above)."""
    a_np, b_np = rand(sa, seed=4), away_from_zero(rand(sb, seed=5))
    a, ta = pair(a_np)
    b, tb = pair(b_np)
    out = (a + b) * a - b / (-a + 3.0)
    tout = (ta + tb) * ta - tb / (-ta + 3.0)
    assert_close(out, tout, rtol=1e-5, atol=1e-6, what="operators forward")
    backward_both(out, tout, seed=6)
    assert_close(a.grad, ta.grad, rtol=1e-5, atol=1e-5, what="operators grad a")
    assert_close(b.grad, tb.grad, rtol=1e-5, atol=1e-5, what="operators grad b")


@pytest.mark.parametrize("expr", [
    lambda x: x * 2.5, lambda x: 2.5 * x, lambda x: x / 3.0, lambda x: 3.0 / x,
    lambda x: x + 1.5, lambda x: 1.5 + x, lambda x: x - 0.25, lambda x: 0.25 - x, lambda x: -x,
    lambda x: x * 2, lambda x: x / 7,
])
def test_scalar_operators(expr):
    """Tensor-with-Python-number operators (one rounding each: rtol 1e-6 forward, 1e-6 grad)."""
    x, tx = pair(away_from_zero(rand((3, 5), seed=7)))
    out, tout = expr(x), expr(tx)
    assert_close(out, tout, rtol=1e-6, atol=0, what="scalar op forward")
    backward_both(out, tout, seed=8)
    assert_close(x.grad, tx.grad, rtol=1e-6, atol=1e-7, what="scalar op grad")


def test_numpy_operands_are_constants():
    """A NumPy array or scalar on either side is a constant (no gradient, broadcasting as usual)."""
    x, tx = pair(rand((2, 3), seed=9))
    c = rand((3,), seed=10)
    tc = torch.from_numpy(c)
    out = x * c + c - np.float32(2.0) * x + c * x - c / (x * x + 1.0)
    tout = tx * tc + tc - 2.0 * tx + tc * tx - tc / (tx * tx + 1.0)
    assert isinstance(c * x, ct.Tensor) and isinstance(np.float32(2.0) * x, ct.Tensor)
    assert_close(out, tout, rtol=1e-6, atol=1e-6, what="numpy constants forward")
    backward_both(out, tout, seed=11)
    assert_close(x.grad, tx.grad, rtol=1e-6, atol=1e-6, what="numpy constants grad")


@pytest.mark.parametrize("shape", [(1,), (4,), (2, 3, 5)])
@pytest.mark.parametrize("factor", [0.125, -3.0, 0.0])
def test_scale(shape, factor):
    """F.scale(x, f) = x * f: exact forward (one rounding) and grad = f * g (rtol 1e-6)."""
    x, tx = pair(rand(shape, seed=12))
    out, tout = F.scale(x, factor), tx * factor
    assert_close(out, tout, rtol=1e-6, atol=0, what="scale forward")
    backward_both(out, tout, seed=13)
    assert_close(x.grad, tx.grad, rtol=1e-6, atol=0, what="scale grad")


def test_only_the_input_that_requires_grad_gets_one():
    a, ta = pair(rand((2, 3), seed=14))
    b, tb = pair(rand((3,), seed=15), requires_grad=False)
    out, tout = F.mul(a, b), ta * tb
    backward_both(out, tout, seed=16)
    assert b.grad is None
    assert_close(a.grad, ta.grad, rtol=1e-6, atol=0, what="mul grad a")


@pytest.mark.parametrize("sa,sb", LARGE)
def test_gradients_accumulate_over_every_use(sa, sb):
    """Each input used by all four ops and a scalar op, so each gradient loop adds into a gradient
    already written (rtol 1e-5 and the bound of a sum of those terms in any order)."""
    a_np, b_np = rand(sa, seed=17), away_from_zero(rand(sb, seed=18))
    a, ta = pair(a_np)
    b, tb = pair(b_np)
    out = (a + b) * 0.5 + (a - b) + a * b + a / b + b / 4.0
    tout = (ta + tb) * 0.5 + (ta - tb) + ta * tb + ta / tb + tb / 4.0
    assert_close(out, tout, rtol=1e-5, atol=1e-6, what="forward")
    g = np.abs(backward_both(out, tout, seed=19).astype(np.float64))
    a64 = np.abs(np.broadcast_to(a_np, g.shape).astype(np.float64))
    b64 = np.abs(np.broadcast_to(b_np, g.shape).astype(np.float64))
    terms_a = np.stack([g * 0.5, g, g * b64, g / b64])  # the terms of each element's gradient, stacked
    terms_b = np.stack([g * 0.5, g, g * a64, g * a64 / b64 ** 2, g / 4])
    assert_grad(a.grad, ta.grad, terms_a, "grad a")
    assert_grad(b.grad, tb.grad, terms_b, "grad b")
