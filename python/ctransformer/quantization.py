"""int8 inference: weights quantised per output row, activations per row on the fly, int32 products.

``model.quantize("int8")`` (in place) or ``ctransformer.quantize_dynamic(model)`` (torch's name; a copy
by default) makes every ``Linear`` of the model compute ``x W^T + b`` in int8, as CTranslate2's
``compute_type="int8"`` and torch's ``quantize_dynamic`` do. The rule, exact to the bit (a NumPy model
of it is in tests/ops/test_ops_int8.py):

- a row r of a weight or of the activations: ``amax = max |x[r]|``, ``q = rint(x * (127 / amax))``
  (ties to even, in [-127, 127]), ``scale = amax / 127``; a row of zeros has q = 0 and scale 0;
- ``y = float32(sum_k q_x q_w) * (scale_x * alpha * scale_w) + b``, the sum exact in int32.

The kernel is chosen at run time from the CPU: AVX-512 VNNI, AVX-VNNI, AVX2 or portable C++
(``int8_kernel()``); all give the same numbers. A quantised model runs forward anywhere, with or without
``no_grad()``, but has no gradient, as torch's dynamically quantised modules: no graph is recorded through
an int8 Linear, and a ``backward()`` that reaches one raises; ``dequantize()`` returns it to float32. The float32
parameters are kept (a tied embedding reads them), so ``state_dict()`` is unchanged; the int8 weights are
``linear.int8_weight``, and quantised checkpoints hold them (``ctransformer.checkpoint``).
"""
from . import _core
from ._core.nn import Module as _Module
from ._core.nn.gpt import GPT as _GPT   # not ctransformer.nn's: that package imports this module (marian, checkpoint)
from ._core.quantization import Int8Weight, int8_kernel, int8_kernels_available, matmul_s32, quantize_rows, \
    quantize_weight, set_int8_kernel
from ._core.quantization import linear as linear_int8

DTYPES = ("qint8", "int8")

__all__ = ["quantize_dynamic", "Int8Weight", "quantize_weight", "quantize_rows", "linear_int8", "matmul_s32",
           "int8_kernel", "set_int8_kernel", "int8_kernels_available"]


def quantize_dynamic(model, dtype="qint8", inplace=False):
    """The model with every Linear in int8 (torch.ao.quantization.quantize_dynamic's name and defaults).

    dtype: "qint8" (torch's name) or "int8". inplace=False quantises a copy, made from the model's
    ``config`` and state_dict (a Transformer); a model without ``config`` needs inplace=True.
    """
    if not isinstance(model, _Module):
        raise TypeError(f"quantize_dynamic: model must be a ctransformer model (a ct.nn.Module), got "
                        f"{type(model).__name__}")
    if str(dtype).replace("torch.", "") not in DTYPES:
        raise ValueError(f"quantize_dynamic: dtype must be one of {DTYPES}, got {dtype!r}")
    if not inplace:
        copy = _empty_like(model)
        copy.load_state_dict(model.state_dict())
        copy.train(model.training)
        model = copy
    return model.quantize("int8")


def _empty_like(model):
    """A new model of `model`'s class and sizes (its weights still to be loaded): from its config (a Transformer),
    or from the sizes a GPT keeps. Its initialisation's draws are given back to the library generator, so a copy
    leaves the random state as it was (torch's copy draws nothing either)."""
    config = getattr(model, "config", None)
    if not isinstance(model, _GPT) and config is None:
        raise TypeError(f"quantize_dynamic: cannot copy a {type(model).__name__} (it has no config); "
                        "pass inplace=True to quantise it in place")
    state = _core.get_rng_state()
    try:
        if isinstance(model, _GPT):
            return _GPT(model.vocab_size, model.max_seq_len, model.n_layers, model.d_model, model.n_head,
                       model.d_inner, dropout=model.drop.p, no_res=model.no_res, no_pos=model.no_pos)
        return type(model)(config)
    finally:
        _core.set_rng_state(state)
