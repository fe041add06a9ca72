"""Checks of a public Python entry point's arguments, each error naming the function and the argument, as the
C++ bindings' are ("save_checkpoint: model must be a ctransformer model (a ct.nn.Module), got str")."""
import numbers
import os

import numpy as np


def transformer(value, where):
    """A ct.nn.Transformer (the encoder-decoder model; a GPT or a layer is refused by name)."""
    from ._core.nn import Transformer

    if not isinstance(value, Transformer):
        raise TypeError(f"{where} must be a ct.nn.Transformer, got {type(value).__name__}")
    return value


def with_methods(value, where, methods, expected):
    """An object with these methods (duck-typed: anything with a state_dict() saves as a model does)."""
    if not all(callable(getattr(value, name, None)) for name in methods):
        raise TypeError(f"{where} must be {expected}, got {type(value).__name__}")
    return value


def path(value, where):
    """A filesystem path (str or os.PathLike) as a str."""
    if isinstance(value, bytes) or not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{where} must be a path (str or os.PathLike), got {type(value).__name__}")
    return os.fspath(value)


def integer(value, where, minimum=None):
    """A Python or NumPy int (not a bool, a float or a str)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{where} must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{where} must be >= {minimum}, got {value}")
    return int(value)


def flag(value, where):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{where} must be True or False, got {type(value).__name__}")
    return bool(value)


def mapping(value, where):
    """A dict, or None for an empty one."""
    if value is not None and not isinstance(value, dict):
        raise TypeError(f"{where} must be a dict or None, got {type(value).__name__}")
    return value or {}
