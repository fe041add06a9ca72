"""ctransformer: the Transformer of "Attention Is All You Need" on a C++ core.

Tensors are float32 and record the operations made on them, so ``loss.backward()`` fills every
leaf's ``.grad``, as in PyTorch. Token ids are NumPy integer arrays.
"""
from ._cpu_check import check_cpu as _check_cpu
from . import _blas

_check_cpu()
del _check_cpu
_blas.load()  # the OpenBLAS the core was linked against, before the core itself

from . import _core  # noqa: E402
from ._blas import BLASCoreWarning  # noqa: E402
from ._core import (  # noqa: E402
    Tensor,
    build_info,
    empty_cache,
    get_num_threads,
    get_rng_state,
    is_grad_enabled,
    kernel_level,
    kernel_levels,
    manual_seed,
    memory_stats,
    ones,
    reset_peak_memory_stats,
    set_cache_limit,
    set_grad_enabled,
    set_kernel_level,
    set_num_threads,
    set_rng_state,
    tensor,
    zeros,
)
from . import amp, annotated, decode, distributed, export, functional, nn, optim, precision, quantization  # noqa: E402
from .amp import BF16EmulationWarning, autocast, is_autocast_enabled  # noqa: E402
from .grad_mode import no_grad  # noqa: E402
from .quantization import quantize_dynamic  # noqa: E402


def show_config(mode="stdout"):
    """Print (or, with mode="dicts", return) what this ctransformer runs on, in numpy's manner: the build's
    instruction set, the BLAS library (name, version, path, the kernel core OpenBLAS picked at run time,
    threads), the CPU's best SIMD level and its bf16 / int8 (VNNI) / AMX units, and the kernel level in force
    with the kernel each product runs at it (and when: the sizes that route it and split it over threads)."""
    return _blas.show_config(_core, mode)


_blas.warn_if_slow_core(_core)  # once, at import: kernels below the CPU's level run everything slower

__all__ = [
    "Tensor", "tensor", "zeros", "ones", "no_grad", "autocast", "is_autocast_enabled", "amp", "is_grad_enabled", "set_grad_enabled",
    "build_info", "show_config", "BLASCoreWarning", "BF16EmulationWarning", "manual_seed", "get_rng_state", "set_rng_state", "set_num_threads", "get_num_threads", "memory_stats",
    "kernel_level", "kernel_levels", "set_kernel_level",
    "reset_peak_memory_stats", "empty_cache", "set_cache_limit", "decode", "distributed", "export", "functional", "nn", "optim", "precision", "quantization", "quantize_dynamic", "annotated",
]
__version__ = "0.1.0"


# Modules reached as attributes but imported when first used: they bring sentencepiece, sacrebleu or the server's
# packages, which `import ctransformer` alone does not need. ct.training, the old name of ct.annotated, warns then.
_LAZY = ("translator", "translate", "serve", "checkpoint", "data", "tasks", "train", "training", "gpt2", "sampling")


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module 'ctransformer' has no attribute {name!r}")
