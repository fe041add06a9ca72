"""Functional ops with forward and backward in C++ (``torch.nn.functional`` names and arguments).

Tensors are ``ctransformer.Tensor``; token ids and targets are NumPy integer arrays; masks are
NumPy boolean arrays (True = keep / may attend).
"""
from ._core.functional import (
    add,
    cross_entropy,
    div,
    dropout,
    embedding,
    gelu,
    gelu_erf,
    kl_div,
    layer_norm,
    linear,
    log_softmax,
    masked_fill,
    matmul,
    mean,
    mul,
    multi_head_attention,
    permute,
    relu,
    reshape,
    scale,
    scaled_dot_product_attention,
    silu,
    softmax,
    sub,
    sum,
    transpose,
)

__all__ = [
    "add", "sub", "mul", "div", "scale", "matmul", "linear", "relu", "gelu", "gelu_erf", "silu", "dropout", "softmax",
    "log_softmax", "layer_norm", "embedding", "masked_fill", "scaled_dot_product_attention",
    "multi_head_attention",
    "reshape", "transpose", "permute", "sum", "mean", "cross_entropy", "kl_div",
]
