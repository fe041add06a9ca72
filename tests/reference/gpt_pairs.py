"""A PyTorch reference GPT and a ctransformer GPT holding the same weights, for the GPT's parity tests
(tests/nn/test_gpt.py, tests/decode/test_gpt_generate_cache.py)."""
import math

import numpy as np
import torch

import ctransformer as ct

from .gpt_reference import GPT as TorchGPT

SMALL = dict(vocab_size=50, max_seq_len=16, num_layer=2, embed_dim=32, num_head=4, feedforward_dim=64)
BIG = dict(vocab_size=512, max_seq_len=64, num_layer=6, embed_dim=384, num_head=6, feedforward_dim=1536)


# The GPT post's size names (the torch reference's) and ctransformer's, the Transformer's.
CT_NAMES = {"num_layer": "n_layers", "embed_dim": "d_model", "num_head": "n_head", "feedforward_dim": "d_inner"}


def ct_config(cfg):
    """`cfg` (the GPT post's names) with ctransformer's names for ct.nn.GPT."""
    return {CT_NAMES.get(key, key): value for key, value in cfg.items()}


def make_pair(cfg, dropout=0.0, direction="torch->ct", seed=0, sharp=False, **flags):
    """A torch reference and a ctransformer GPT holding the same weights.

    direction "torch->ct" initialises torch and loads its state dict into ctransformer;
    "ct->torch" the other way. sharp=True replaces the GPT's tiny N(0, 0.02) initial weights by larger
    random ones so attention is peaked and the causal -inf mask and every residual path matter."""
    torch.manual_seed(seed)
    ct.manual_seed(seed)
    tm = TorchGPT(**cfg, dropout=dropout, **flags)
    cm = ct.nn.GPT(**ct_config(cfg), dropout=dropout, **flags)
    if sharp:
        rng = np.random.default_rng(seed)
        state = {}
        for name, value in tm.state_dict().items():
            if name == "language_model_head.weight":
                state[name] = state["word_token_embedding.weight"]
            elif "norm" in name and name.endswith("weight"):
                state[name] = (1 + 0.2 * rng.standard_normal(value.shape)).astype(np.float32)
            else:
                scale = 1.0 if "embedding" in name else 0.5 / math.sqrt(value.shape[-1])
                state[name] = (scale * rng.standard_normal(value.shape)).astype(np.float32)
        tm.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
        cm.load_state_dict(state)
    elif direction == "torch->ct":
        cm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    else:
        tm.load_state_dict({k: torch.from_numpy(v) for k, v in cm.state_dict().items()})
    return tm, cm


def prompts(cfg, b, t, seed=3):
    return np.random.default_rng(seed).integers(0, cfg["vocab_size"], (b, t))
