"""matmul (2-D and batched, broadcast batch dimensions), the @ operator and linear, against torch.

Tolerance: each output is a K-term float32 dot product whose summation order is BLAS's on both
sides but not the same BLAS, so results differ by a few ulps of the terms' magnitude; with inputs
of order 1 and K <= 17: rtol 1e-5, atol 1e-5 (atol covers outputs that cancel to near 0).
Gradients are again dot products (over M, N or the batch): the same tolerance.
"""
import numpy as np
import pytest
import torch

import ctransformer as ct
from helpers import assert_close, pair, rand
from upstream import backward_both
from kernel_levels import every_level

# Every test at each level's small products and few-rows products (kernels/simd/small_gemm.cpp, kernels/fp32/).
at_every_level = every_level("loops")

F = ct.functional
RTOL, ATOL = 1e-5, 1e-5

MATMUL_SHAPES = [
    ((3, 4), (4, 5)),            # non-square 2-D
    ((1, 1), (1, 1)),            # length 1
    ((1, 7), (7, 1)),            # row times column
    ((6, 1), (1, 3)),            # K = 1 (outer product)
    ((2, 3, 4), (4, 5)),         # batched against a matrix
    ((4, 5), (2, 5, 3)),         # a matrix against a batch
    ((2, 3, 4), (2, 4, 5)),      # same batch
    ((2, 1, 3, 4), (5, 4, 6)),   # batch dimensions broadcast to (2, 5)
    ((1, 3, 4), (4, 4, 2)),      # batch of 1 broadcast
    ((3, 1, 2, 17), (1, 4, 17, 2)),
    ((3, 40), (40, 37)),         # small products take straight SIMD loops: C in blocks of 32 columns
    ((2, 2, 9), (2, 9, 70)),     # (two blocks and a 6-wide tail), B^T rows 8 at a time (+ a tail)
]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES)
def test_matmul(sa, sb):
    a, ta = pair(rand(sa, seed=1))
    b, tb = pair(rand(sb, seed=2))
    out, tout = F.matmul(a, b), torch.matmul(ta, tb)
    assert out.shape == tuple(tout.shape)
    assert_close(out, tout, rtol=RTOL, atol=ATOL, what="matmul forward")
    backward_both(out, tout, seed=3)
    assert_close(a.grad, ta.grad, rtol=RTOL, atol=ATOL, what="matmul grad input")
    assert_close(b.grad, tb.grad, rtol=RTOL, atol=ATOL, what="matmul grad other")


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES[:5])
def test_matmul_operator(sa, sb):
    a, ta = pair(rand(sa, seed=4))
    b, tb = pair(rand(sb, seed=5))
    out, tout = a @ b, ta @ tb
    assert_close(out, tout, rtol=RTOL, atol=ATOL, what="@ forward")
    backward_both(out, tout, seed=6)
    assert_close(a.grad, ta.grad, rtol=RTOL, atol=ATOL, what="@ grad a")
    assert_close(b.grad, tb.grad, rtol=RTOL, atol=ATOL, what="@ grad b")


def test_matmul_with_numpy_on_the_left():
    """ndarray @ Tensor goes to Tensor.__rmatmul__ and keeps the graph."""
    m = rand((2, 3), seed=7)
    b, tb = pair(rand((3, 4), seed=8))
    out, tout = m @ b, torch.from_numpy(m) @ tb
    assert isinstance(out, ct.Tensor)
    assert_close(out, tout, rtol=RTOL, atol=ATOL, what="ndarray @ forward")
    backward_both(out, tout, seed=9)
    assert_close(b.grad, tb.grad, rtol=RTOL, atol=ATOL, what="ndarray @ grad")


def test_matmul_same_tensor_both_sides():
    """x @ x: both gradient contributions add up in one .grad."""
    x, tx = pair(rand((4, 4), seed=10))
    out, tout = x @ x, tx @ tx
    backward_both(out, tout, seed=11)
    assert_close(x.grad, tx.grad, rtol=RTOL, atol=ATOL, what="x @ x grad")


LINEAR_SHAPES = [
    ((4, 3), 5),       # 2-D input
    ((2, 5, 3), 2),    # batched input
    ((3,), 4),         # 1-D input
    ((1, 1), 1),       # length 1
    ((2, 3, 4, 8), 6),
]


@pytest.mark.parametrize("x_shape,out_features", LINEAR_SHAPES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear(x_shape, out_features, with_bias):
    in_features = x_shape[-1]
    x, tx = pair(rand(x_shape, seed=12))
    w, tw = pair(rand((out_features, in_features), seed=13))
    if with_bias:
        b, tb = pair(rand((out_features,), seed=14))
        out, tout = F.linear(x, w, b), torch.nn.functional.linear(tx, tw, tb)
    else:
        out, tout = F.linear(x, w), torch.nn.functional.linear(tx, tw)
    assert out.shape == tuple(tout.shape)
    assert_close(out, tout, rtol=RTOL, atol=ATOL, what="linear forward")
    backward_both(out, tout, seed=15)
    assert_close(x.grad, tx.grad, rtol=RTOL, atol=ATOL, what="linear grad input")
    assert_close(w.grad, tw.grad, rtol=RTOL, atol=ATOL, what="linear grad weight")
    if with_bias:
        assert_close(b.grad, tb.grad, rtol=RTOL, atol=ATOL, what="linear grad bias")


def test_linear_weight_only_needs_grad():
    """A constant input (token features) with a trainable weight: only the weight gets a grad."""
    x, tx = pair(rand((5, 3), seed=16), requires_grad=False)
    w, tw = pair(rand((2, 3), seed=17))
    b, tb = pair(rand((2,), seed=18), requires_grad=False)
    out, tout = F.linear(x, w, b), torch.nn.functional.linear(tx, tw, tb)
    backward_both(out, tout, seed=19)
    assert x.grad is None and b.grad is None
    assert_close(w.grad, tw.grad, rtol=RTOL, atol=ATOL, what="linear grad weight")


@pytest.mark.parametrize("bias", [True, False])
def test_linear_with_zero_in_features_gives_the_bias(bias):
    # Found by tests/fuzz: with in_features = 0 the row count came out 0, the bias was never copied
    # and the output was uninitialised memory. torch: an empty product, so y = bias (or 0); exact.
    x = ct.tensor(np.zeros((2, 3, 0), np.float32), requires_grad=True)
    w = ct.tensor(np.zeros((4, 0), np.float32), requires_grad=True)
    b = ct.tensor(np.arange(4, dtype=np.float32) + 0.5, requires_grad=True) if bias else None
    out = F.linear(x, w, b)
    expected = np.broadcast_to(np.arange(4, dtype=np.float32) + 0.5 if bias else np.zeros(4, np.float32), (2, 3, 4))
    assert np.array_equal(out.numpy(), expected)
    out.sum().backward()
    if bias:
        assert np.array_equal(b.grad.numpy(), np.full(4, 6.0, np.float32))
