"""masked_fill against torch: the mask broadcasts to the input; filled positions get no gradient.

Values are copied or replaced, so forward and gradient are exact (rtol 0, atol 0).
"""
import numpy as np
import pytest
import torch

import ctransformer as ct
from helpers import assert_close, pair, rand
from upstream import backward_both

F = ct.functional

MASK_CASES = [
    ((3, 4), (3, 4)),
    ((3, 4), (4,)),          # a row mask broadcast over rows
    ((2, 3, 4), (2, 1, 4)),  # a padding mask (b, 1, Lk)
    ((2, 3, 4), (3, 1)),
    ((1,), (1,)),
    ((2, 2, 3, 3), (2, 1, 3, 3)),
]


@pytest.mark.parametrize("x_shape,mask_shape", MASK_CASES)
@pytest.mark.parametrize("value", [-1e9, float("-inf"), 0.5])
def test_masked_fill(x_shape, mask_shape, value):
    """value where the mask is True; zero gradient there, g elsewhere (exact)."""
    mask = np.random.default_rng(7).random(mask_shape) < 0.4
    x, tx = pair(rand(x_shape, seed=8))
    out = F.masked_fill(x, mask, value)
    tout = tx.masked_fill(torch.from_numpy(mask), value)
    assert_close(out, tout, rtol=0, atol=0, what="masked_fill forward")
    backward_both(out, tout, seed=9)
    assert_close(x.grad, tx.grad, rtol=0, atol=0, what="masked_fill grad")


def test_masked_fill_integer_mask_means_nonzero():
    x, tx = pair(rand((2, 3), seed=10))
    mask = np.array([[0, 2, 0], [1, 0, 0]], dtype=np.int32)
    out = F.masked_fill(x, mask, 7.0)
    tout = tx.masked_fill(torch.from_numpy(mask != 0), 7.0)
    assert_close(out, tout, rtol=0, atol=0, what="forward")
