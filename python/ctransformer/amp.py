"""``autocast``: bf16 mixed precision, as ``torch.autocast("cpu", dtype=torch.bfloat16)``.

Inside the region, linear, matmul and attention's products multiply operands rounded to bfloat16 and
accumulate in float32, forward and backward (an op remembers that it ran in a region, wherever
``backward()`` is called). Softmax, layer norm, the losses and the optimizer stay float32, and so do
the parameters. One difference from torch: a product returns float32 (its fp32 sum is not rounded
again to bf16).

Parameters are rounded to bf16 once and reused by every product until the outermost region ends or
``Adam.step()`` changes them. Change a parameter in place by other means inside a region and its
cached copy is stale until the region ends (as in torch).

On a CPU with AVX512_BF16 (Intel Cooper Lake, Sapphire/Emerald Rapids; AMD Zen 4 and 5) the products
run on ``vdpbf16ps``; on an aarch64 CPU with ARM's BF16 (Graviton3 and 4, Neoverse N2/V1/V2, Apple M2 on) on
``bfdot`` (whose additions round to odd: each within one unit in the last place); elsewhere the same rounded operands go through the BLAS's float32 product
(``bf16_kernel()`` says which): the same numbers up to summation order, and no faster than float32 in
training (measured on an AMD Zen 1: a small model's training step 893 ms in bf16 against 788 ms in float32);
decoding at a few rows reads the weights' bf16 copies widened in registers, half float32's bytes (GPT-2 at
batch 1 on a Zen 3: 16-18 ms a token against 22-25 in float32). The
first region entered with that kernel warns once (``BF16EmulationWarning``), naming the CPU.
"""
import functools
import warnings

import numpy as np

from ._core import amp as _amp

_DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16"}


def _dtype_name(dtype):
    """'bfloat16' from 'bfloat16', 'bf16', or torch.bfloat16 / numpy-like objects whose str ends in bfloat16."""
    name = str(dtype).rsplit(".", 1)[-1]
    if name not in _DTYPES:
        raise ValueError(f"autocast: dtype must be 'bfloat16' (the CPU autocast dtype), got {dtype!r}")
    return _DTYPES[name]


class BF16EmulationWarning(RuntimeWarning):
    """bf16 autocast on a CPU without AVX512_BF16: the products run the emulated kernel, slower than float32."""


_warned_emulation = False


def _cpu_name():
    import platform

    from ._cpu_check import cpu_model
    return cpu_model() or platform.processor() or platform.machine()


def _warn_if_emulated():
    """Once a process: say that bf16 runs emulated here, on which CPU, and what that costs."""
    global _warned_emulation
    if _warned_emulation or bf16_kernel() != "emulated":   # (checked first: every region entered asks)
        return
    from ._core import build_info
    cpu = build_info()["cpu"]
    if cpu["avx512_bf16"] or cpu["bf16"]:
        return                            # a kernel forced by set_bf16_kernel on a bf16 CPU: the caller chose it
    _warned_emulation = True
    why = (f"capped by CTRANSFORMER_KERNEL_LEVEL={cpu['level_cap']}" if cpu["level_cap"]
           else "no BF16 instructions" if cpu["simd_level"] == "neon"
           else "no AVX512_BF16")
    warnings.warn(f"autocast: bf16 is emulated on this CPU ({_cpu_name()}, {why}): the 'emulated' kernel rounds "
                  "the operands to bf16 and multiplies them in float32, so training and prompts run no faster than "
                  "float32 here (decoding a few rows at a time reads the weights' bf16 copies, half float32's bytes; "
                  "the numbers are the same up to summation order). Train in float32 on this CPU for speed.",
                  BF16EmulationWarning, stacklevel=3)


class autocast:
    """Context manager and decorator: ``with ct.autocast(dtype="bfloat16"):`` or
    ``ct.autocast("cpu", dtype="bfloat16")``, as torch's. ``enabled=False`` turns autocast off inside."""

    def __init__(self, device_type="cpu", dtype="bfloat16", enabled=True, cache_enabled=True):
        if device_type != "cpu":
            raise ValueError(f"autocast: device_type must be 'cpu' (ctransformer runs on the CPU), got {device_type!r}")
        if not cache_enabled:
            raise ValueError("autocast: cache_enabled=False is not supported; the bf16 copies of the parameters "
                             "are always cached for the region")
        self.fast_dtype = _dtype_name(dtype)
        if not isinstance(enabled, (bool, np.bool_)):
            raise TypeError(f"autocast: enabled must be True or False, got {type(enabled).__name__}")
        self.enabled = bool(enabled)
        self._region = None

    def __enter__(self):
        if self._region is not None:
            raise RuntimeError("autocast: this object is already in use; make one per `with`")
        if self.enabled:
            _warn_if_emulated()
        self._region = _amp.AutocastRegion(self.enabled)
        self._region.__enter__()
        return self

    def __exit__(self, *exc):
        region, self._region = self._region, None
        region.__exit__(*exc)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with autocast(dtype=self.fast_dtype, enabled=self.enabled):
                return fn(*args, **kwargs)

        return wrapper


def is_autocast_enabled():
    """Whether this thread is inside an enabled autocast region."""
    return _amp.is_autocast_enabled()


def bf16_kernel():
    """The kernel bf16 products use here: 'amx_bf16' (Intel's AMX tiles; a few rows of x W^T by vdpbf16ps),
    'avx512_bf16' (vdpbf16ps), 'neon_bf16' (aarch64's bfdot) or 'emulated' (bf16-rounded operands through float32
    sgemm, on CPUs without any)."""
    return _amp.bf16_kernel()


def set_bf16_kernel(name):
    """'auto' (the CPU's best), 'amx_bf16', 'avx512_bf16' or 'neon_bf16' (ValueError where the CPU lacks it) or
    'emulated'."""
    _amp.set_bf16_kernel(name)


from ._core.amp import gemm_bf16, round_to_bf16, widen_bf16  # noqa: E402

__all__ = ["autocast", "BF16EmulationWarning", "is_autocast_enabled", "bf16_kernel", "set_bf16_kernel", "round_to_bf16", "widen_bf16", "gemm_bf16"]
