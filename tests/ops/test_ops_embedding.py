"""embedding (with padding_idx, including negative) against torch.

A lookup copies rows, so the forward is exact (rtol 0). The embedding gradient sums the upstream
rows of repeated ids, in id order on our side and torch's order on its side: rtol 1e-6, atol 1e-6.
"""
import numpy as np
import pytest
import torch

import ctransformer as ct
from helpers import assert_close, pair, rand
from upstream import backward_both

F = ct.functional

V, D = 7, 5
IDS = [
    np.array([3]),                              # length 1
    np.array([0, 1, 2, 3, 4, 5, 6]),            # every row once
    np.array([[1, 0, 1], [6, 1, 0]]),           # repeated ids and the padding candidates 0 / 6
    np.array([[[2, 2], [2, 0]], [[5, 6], [0, 0]]]),  # rank 3, padding rows at the ends
]


@pytest.mark.parametrize("ids", IDS)
@pytest.mark.parametrize("padding_idx", [None, 0, 2, -1, -V])
def test_embedding(ids, padding_idx):
    w, tw = pair(rand((V, D), seed=1))
    out = F.embedding(ids, w, padding_idx=padding_idx)
    tout = torch.nn.functional.embedding(torch.from_numpy(ids), tw, padding_idx=padding_idx)
    assert out.shape == tuple(tout.shape)
    assert_close(out, tout, rtol=0, atol=0, what="embedding forward (padding row is looked up as is)")
    backward_both(out, tout, seed=2)
    assert_close(w.grad, tw.grad, rtol=1e-6, atol=1e-6, what="embedding grad weight")
    if padding_idx is not None:
        row = padding_idx % V
        assert (w.grad.numpy()[row] == 0).all(), "no gradient may reach the padding row"


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.int16])
def test_embedding_accepts_integer_dtypes(dtype):
    ids = np.array([[1, 4], [4, 0]], dtype=dtype)
    w, tw = pair(rand((V, D), seed=3))
    out = F.embedding(ids, w, padding_idx=4)
    tout = torch.nn.functional.embedding(torch.from_numpy(ids.astype(np.int64)), tw, padding_idx=4)
    assert_close(out, tout, rtol=0, atol=0, what="forward")
    backward_both(out, tout, seed=4)
    assert_close(w.grad, tw.grad, rtol=1e-6, atol=1e-6, what="grad")


def test_embedding_of_a_repeated_id_sums_its_gradients():
    w = ct.tensor(rand((3, 2), seed=5), requires_grad=True)
    out = F.embedding(np.array([1, 1, 1]), w)
    g = rand((3, 2), seed=6)
    out.backward(ct.tensor(g))
    expected = np.zeros((3, 2), np.float32)
    expected[1] = g.sum(0)
    assert_close(w.grad, expected, rtol=1e-6, atol=1e-6, what="summed rows")
