"""reshape / view / transpose / permute and sum / mean (all elements and per dim, keepdim) against torch.

Shape ops move values, so they and their gradients are exact (rtol 0). Sums accumulate in float64
and round once, torch accumulates in float32 pairwise: rtol 1e-5, atol 1e-6 for sums and means
(their gradients are copies of g, or g / n: rtol 1e-6).
"""
import numpy as np
import pytest
import torch

import ctransformer as ct
from helpers import assert_close, pair, rand
from upstream import backward_both

F = ct.functional


@pytest.mark.parametrize("shape,new", [
    ((2, 3, 4), (6, 4)), ((2, 3, 4), (4, -1)), ((2, 3, 4), (-1,)), ((5,), (1, 5, 1)),
    ((1,), ()), ((3, 4), (2, 2, 3)),
])
def test_reshape(shape, new):
    x, tx = pair(rand(shape, seed=1))
    for ours in (F.reshape(x, list(new)), x.reshape(*new) if new else x.reshape(()), x.view(new)):
        x.zero_grad()
        tx.grad = None
        tout = tx.reshape(new)
        assert ours.shape == tuple(tout.shape)
        assert_close(ours, tout, rtol=0, atol=0, what="reshape forward")
        backward_both(ours, tout, seed=2)
        assert_close(x.grad, tx.grad, rtol=0, atol=0, what="reshape grad")


@pytest.mark.parametrize("shape,d0,d1", [
    ((3, 4), 0, 1), ((2, 3, 4), 1, 2), ((2, 3, 4), -1, -3), ((2, 3, 4, 5), 1, -2), ((1, 5), 0, 1), ((4, 4), 1, 1),
])
def test_transpose(shape, d0, d1):
    x, tx = pair(rand(shape, seed=3))
    out, tout = F.transpose(x, d0, d1), tx.transpose(d0, d1)
    assert_close(out, tout, rtol=0, atol=0, what="transpose forward")
    backward_both(out, tout, seed=4)
    assert_close(x.grad, tx.grad, rtol=0, atol=0, what="transpose grad")
    out2 = x.transpose(d0, d1)
    assert_close(out2, tout, rtol=0, atol=0, what="Tensor.transpose")


@pytest.mark.parametrize("shape,dims", [
    ((2, 3, 4), (2, 0, 1)), ((2, 3, 4, 5), (0, 2, 1, 3)), ((2, 3, 4), (-1, -2, -3)), ((5,), (0,)), ((1, 3, 1), (2, 1, 0)),
])
def test_permute(shape, dims):
    x, tx = pair(rand(shape, seed=5))
    out, tout = F.permute(x, list(dims)), tx.permute(*dims)
    assert_close(out, tout, rtol=0, atol=0, what="permute forward")
    backward_both(out, tout, seed=6)
    assert_close(x.grad, tx.grad, rtol=0, atol=0, what="permute grad")
    assert_close(x.permute(*dims), tout, rtol=0, atol=0, what="Tensor.permute(*dims)")
    assert_close(x.permute(list(dims)), tout, rtol=0, atol=0, what="Tensor.permute(list)")


def test_multi_head_split_and_merge_round_trip():
    """(b, L, h*d) -> (b, h, L, d) -> back, as attention does: identity, gradient g (exact)."""
    x, tx = pair(rand((2, 5, 12), seed=7))
    heads = x.reshape(2, 5, 3, 4).transpose(1, 2)
    back = heads.transpose(1, 2).reshape(2, 5, 12)
    theads = tx.view(2, 5, 3, 4).transpose(1, 2)
    assert_close(heads, theads, rtol=0, atol=0, what="split")
    assert_close(back, tx, rtol=0, atol=0, what="round trip")
    backward_both(heads, theads, seed=8)
    assert_close(x.grad, tx.grad, rtol=0, atol=0, what="split grad")


SHAPES = [(1,), (7,), (3, 4), (2, 3, 4), (2, 1, 5)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", ["sum", "mean"])
def test_reduce_all(shape, op):
    x, tx = pair(rand(shape, seed=9))
    out, tout = getattr(F, op)(x), getattr(torch, op)(tx)
    assert out.shape == ()
    assert_close(out, tout, rtol=1e-5, atol=1e-6, what=f"{op} forward")
    backward_both(out, tout, seed=10)
    assert_close(x.grad, tx.grad, rtol=1e-6, atol=0, what=f"{op} grad")
    assert_close(getattr(x, op)(), tout, rtol=1e-5, atol=1e-6, what=f"Tensor.{op}()")


@pytest.mark.parametrize("shape,dim", [((7,), 0), ((3, 4), 0), ((3, 4), 1), ((3, 4), -1), ((2, 3, 4), 1),
                                       ((2, 3, 4), -3), ((2, 1, 5), 1)])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("op", ["sum", "mean"])
def test_reduce_dim(shape, dim, keepdim, op):
    x, tx = pair(rand(shape, seed=11))
    out = getattr(F, op)(x, dim, keepdim)
    tout = getattr(torch, op)(tx, dim, keepdim=keepdim)
    assert out.shape == tuple(tout.shape)
    assert_close(out, tout, rtol=1e-5, atol=1e-6, what=f"{op} forward")
    backward_both(out, tout, seed=12)
    assert_close(x.grad, tx.grad, rtol=1e-6, atol=0, what=f"{op} grad")
    method = getattr(x, op)(dim=dim, keepdim=keepdim)
    assert_close(method, tout, rtol=1e-5, atol=1e-6, what=f"Tensor.{op}(dim)")
