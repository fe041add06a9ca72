"""ctransformer: the Transformer of "Attention Is All You Need" on a C++ core.

Tensors are float32 and record the operations made on them, so ``loss.backward()`` fills every
leaf's ``.grad``, as in PyTorch. Token ids are NumPy integer arrays.
"""
from ._core import (
    Tensor,
    get_num_threads,
    get_rng_state,
    is_grad_enabled,
    manual_seed,
    ones,
    set_grad_enabled,
    set_num_threads,
    set_rng_state,
    tensor,
    zeros,
)
from . import decode, functional, nn, optim, training
from .grad_mode import no_grad

__all__ = [
    "Tensor", "tensor", "zeros", "ones", "no_grad", "is_grad_enabled", "set_grad_enabled",
    "manual_seed", "get_rng_state", "set_rng_state", "set_num_threads", "get_num_threads", "decode", "functional", "nn", "optim", "training",
]
__version__ = "0.1.0"
