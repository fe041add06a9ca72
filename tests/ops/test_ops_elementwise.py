"""add / sub / mul / div / scale and the Python operators, with NumPy broadcasting, against torch.

Tolerance: a single float32 operation per element is correctly rounded on both sides, so the
forward is exact up to the last ulp (rtol 1e-6). Gradients of broadcast inputs are sums over the
broadcast dimensions, whose order may differ from torch's: rtol 1e-5, atol 1e-6.
"""
import numpy as np
import pytest
import torch

import ctransformer as ct
from helpers import assert_close, pair, rand
from upstream import backward_both

F = ct.functional

SHAPES = [
    ((3, 4), (3, 4)),          # same shape, non-square
    ((1,), (1,)),              # length 1
    ((2, 3, 4), (4,)),         # trailing vector
    ((2, 1, 4), (3, 1)),       # both sides broadcast
    ((5, 1), (1, 6)),          # outer-product style
    ((1,), (2, 3)),            # a one-element tensor against a matrix
    ((2, 3, 1, 5), (3, 4, 1)),  # rank 4 against rank 3
]


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
@pytest.mark.parametrize("sa,sb", SHAPES)
def test_binary_op_forward_and_grads(name, sa, sb):
    ct_fn, torch_fn = OPS[name]
    a_np, b_np = rand(sa, seed=1), rand(sb, seed=2)
    if name == "div":
        b_np = away_from_zero(b_np)
    a, ta = pair(a_np)
    b, tb = pair(b_np)
    out, tout = ct_fn(a, b), torch_fn(ta, tb)
    assert_close(out, tout, rtol=1e-6, atol=0, what=f"{name} forward")
    backward_both(out, tout, seed=3)
    assert_close(a.grad, ta.grad, rtol=1e-5, atol=1e-6, what=f"{name} grad input")
    assert_close(b.grad, tb.grad, rtol=1e-5, atol=1e-6, what=f"{name} grad other")


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
