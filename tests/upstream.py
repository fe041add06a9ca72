"""Backward with a random upstream gradient, the same on both sides.

``out.backward(g)`` is ``(out * g).sum().backward()``: with a random ``g`` every output element
weighs differently, so a gradient cannot match the reference by accident (a ones-gradient hides
errors that cancel in the sum, a permuted gradient, a missing broadcast reduction...).
"""
import numpy as np
import torch

import ctransformer as ct
from helpers import rand


def upstream(shape, seed):
    """A random float32 upstream gradient; 0-d shapes give a 0-d array."""
    return np.asarray(rand(shape, seed), dtype=np.float32).reshape(shape)


def backward_both(ct_out, torch_out, seed=1234):
    """Run backward on both outputs with one random upstream gradient; returns it."""
    g = upstream(tuple(torch_out.shape), seed)
    ct_out.backward(ct.tensor(g))
    torch_out.backward(torch.from_numpy(g.copy()))
    return g
