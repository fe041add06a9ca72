"""Modules with named parameters, ``state_dict`` and ``train()``/``eval()`` as ``torch.nn``.

The encoder-decoder Transformer covers the paper's post-norm model (``Transformer(...)``, with
jadore801120's signature and parameter names) and the toy translator's small pre-norm
model (``Transformer.small_pre_norm()``; ``seed003()`` is its older name), both built from
one ``TransformerConfig``. Masks are NumPy boolean arrays, True where attending is allowed.
"""
from .._core.nn import (
    Decoder,
    DecoderLayer,
    Dropout,
    Embedding,
    Encoder,
    EncoderLayer,
    IncompatibleKeys,
    LayerNorm,
    Linear,
    Module,
    MultiHeadAttention,
    PositionalEncoding,
    PositionEmbedding,
    PositionwiseFeedForward,
    ScaledDotProductAttention,
    Transformer,
    TransformerConfig,
    get_pad_mask,
    get_subsequent_mask,
)
from . import gpt
from .gpt import GPT

__all__ = [
    "Module", "Linear", "Embedding", "LayerNorm", "Dropout", "IncompatibleKeys",
    "PositionalEncoding", "ScaledDotProductAttention", "MultiHeadAttention", "PositionwiseFeedForward",
    "EncoderLayer", "DecoderLayer", "Encoder", "Decoder", "PositionEmbedding", "Transformer",
    "TransformerConfig", "get_pad_mask", "get_subsequent_mask", "gpt", "GPT",
]
