"""ctransformer: the Transformer of "Attention Is All You Need" on a C++ core.

Tensors are float32 and record the operations made on them, so ``loss.backward()`` fills every
leaf's ``.grad``, as in PyTorch. Token ids are NumPy integer arrays.
"""
from ._cpu_check import check_cpu as _check_cpu

_check_cpu()
del _check_cpu

from ._core import (  # noqa: E402
    Tensor,
    build_info,
    empty_cache,
    get_num_threads,
    get_rng_state,
    is_grad_enabled,
    manual_seed,
    memory_stats,
    ones,
    reset_peak_memory_stats,
    set_cache_limit,
    set_grad_enabled,
    set_num_threads,
    set_rng_state,
    tensor,
    zeros,
)
from . import decode, distributed, export, functional, nn, optim, training  # noqa: E402
from .grad_mode import no_grad  # noqa: E402

__all__ = [
    "Tensor", "tensor", "zeros", "ones", "no_grad", "is_grad_enabled", "set_grad_enabled",
    "build_info", "manual_seed", "get_rng_state", "set_rng_state", "set_num_threads", "get_num_threads", "memory_stats",
    "reset_peak_memory_stats", "empty_cache", "set_cache_limit", "decode", "distributed", "export", "functional", "nn", "optim", "training",
]
__version__ = "0.1.0"
