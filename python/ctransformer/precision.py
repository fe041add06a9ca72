"""``precision``: the one word for the number format a computation runs in, in the API and the CLIs.

Its values are NumPy's and torch's dtype names:

- ``"float32"``: everything in float32;
- ``"bfloat16"``: the matrix products in bf16 with float32 weights and accumulation (``ct.autocast``), for
  training and decoding;
- ``"int8"``: every Linear's weights and activations in int8 (``ct.quantization``), for decoding only;
- ``"default"`` (decoding only): the model as it is, under whatever ``ct.autocast`` region encloses the call.

The short spellings ``"fp32"`` and ``"bf16"`` are aliases of the values, and CTranslate2's name for the
argument, ``compute_type``, is an alias of ``precision`` (``--compute-type`` in ctransformer-translate).
"""

__all__ = ["ALIASES", "TRAINING", "DECODING", "SERVING", "canonical", "from_arguments"]

ALIASES = {"fp32": "float32", "bf16": "bfloat16"}
"""The short spellings, each to the name it stands for."""
TRAINING = ("float32", "bfloat16")
"""The precisions a training run takes (the tasks' ``precision``, ``ctransformer-train --precision``)."""
DECODING = ("default", "float32", "bfloat16", "int8")
"""The precisions a decoding call takes (``ct.decode``'s ``precision``, ``ctransformer-translate --precision``)."""
SERVING = ("float32", "bfloat16", "int8")
"""The precisions a served model runs in (``ctransformer-serve --precision``, a request's ``precision``)."""


def canonical(value, allowed, caller, argument="precision"):
    """The precision `value` names ("bf16" -> "bfloat16"), one of `allowed`; a ValueError names the caller and
    the argument."""
    name = ALIASES.get(value, value) if isinstance(value, str) else value
    if not isinstance(name, str) or name not in allowed:
        raise ValueError(f"{caller}: {argument} must be one of {', '.join(allowed)} (or the aliases fp32, bf16), "
                         f"got {value!r}")
    return name


def from_arguments(precision, compute_type, allowed, caller, default="default"):
    """The precision of a call given `precision` and its alias `compute_type` (None: not given); both given
    and naming different precisions is a ValueError."""
    given = [canonical(v, allowed, caller, argument) for v, argument in ((precision, "precision"),
                                                                         (compute_type, "compute_type")) if v is not None]
    if len(given) == 2 and given[0] != given[1]:
        raise ValueError(f"{caller}: precision={precision!r} and compute_type={compute_type!r} (its alias) disagree")
    return given[0] if given else default
