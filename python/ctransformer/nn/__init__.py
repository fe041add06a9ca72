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
from . import gpt, utils
from .activations import GELU, ReLU, SiLU
from .containers import ModuleList, Sequential
from .gpt import GPT
from .. import marian as _marian


def _from_pretrained(path):
    """A Hugging Face Marian directory (``config.json`` and ``model.safetensors``; the opus-mt translators) as a
    Transformer in eval mode, whose ``state_dict`` names are Hugging Face's (ctransformer.marian). A pickled
    ``pytorch_model.bin`` is refused, with the command that converts it."""
    return _marian.load_pretrained(path)


def _save_pretrained(self, path, eos_token_id=0):
    """Write a Marian-layout model as a Hugging Face directory (``config.json``, ``model.safetensors``) that
    ``transformers.MarianMTModel.from_pretrained`` loads."""
    return _marian.save_pretrained(self, path, eos_token_id)


def _gpt_from_pretrained(path):
    """A Hugging Face GPT-2 directory (``config.json`` and ``model.safetensors`` of a ``GPT2LMHeadModel`` or
    ``GPT2Model``) as a GPT in eval mode (ctransformer.gpt2). A pickled ``pytorch_model.bin`` is refused."""
    from .. import gpt2

    return gpt2.load_pretrained(path)


def _gpt_save_pretrained(self, path):
    """Write the GPT as a Hugging Face GPT-2 directory (``config.json``, ``model.safetensors``) that
    ``transformers.GPT2LMHeadModel.from_pretrained`` loads."""
    from .. import gpt2

    return gpt2.save_pretrained(self, path)


def Parameter(data, requires_grad=True):
    """A tensor that a Module registers as a parameter when assigned to it (``self.scale = Parameter(...)``),
    as torch.nn.Parameter: a leaf that requires grad. From a Tensor it shares that tensor's data (outside its
    graph); from a NumPy array or a number it holds a float32 copy."""
    from .._core import Tensor, tensor

    if isinstance(data, Tensor):
        return data.detach().requires_grad_(requires_grad)
    return tensor(data, requires_grad=requires_grad)


Transformer.from_pretrained = staticmethod(_from_pretrained)
Transformer.save_pretrained = _save_pretrained
GPT.from_pretrained = staticmethod(_gpt_from_pretrained)
GPT.save_pretrained = _gpt_save_pretrained

__all__ = [
    "Module", "Parameter", "Linear", "Embedding", "LayerNorm", "Dropout", "IncompatibleKeys",
    "PositionalEncoding", "ScaledDotProductAttention", "MultiHeadAttention", "PositionwiseFeedForward",
    "EncoderLayer", "DecoderLayer", "Encoder", "Decoder", "PositionEmbedding", "Transformer",
    "TransformerConfig", "get_pad_mask", "get_subsequent_mask", "gpt", "GPT", "ModuleList", "Sequential", "ReLU",
    "GELU", "SiLU", "utils",
]
