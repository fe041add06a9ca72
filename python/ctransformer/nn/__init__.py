"""Modules with named parameters, ``state_dict`` and ``train()``/``eval()`` as ``torch.nn``."""
from .._core.nn import (
    Dropout,
    Embedding,
    IncompatibleKeys,
    LayerNorm,
    Linear,
    Module,
)
from . import gpt
from .gpt import GPT

__all__ = ["Module", "Linear", "Embedding", "LayerNorm", "Dropout", "IncompatibleKeys", "gpt", "GPT"]
