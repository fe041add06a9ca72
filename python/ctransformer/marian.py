"""Hugging Face Marian directories (the opus-mt translators): ``config.json`` and ``model.safetensors`` in and out.

``load_pretrained(path)`` (``ct.nn.Transformer.from_pretrained``) reads a directory that
``MarianMTModel.save_pretrained`` wrote, or that was downloaded from the Hugging Face Hub, into a
``Transformer`` in the Marian layout (``TransformerConfig.marian``), whose ``state_dict`` names are Hugging
Face's. ``save_pretrained(model, path)`` writes one back that ``transformers`` loads.

What this module knows of Hugging Face's side (from ``modeling_marian.py`` and ``configuration_marian.py``):
- a saved file leaves out the tied copies (``model.encoder.embed_tokens``, ``model.decoder.embed_tokens`` and
  ``lm_head`` when they are ``model.shared``) and the positional tables, which the model recomputes; older
  conversions keep some of them. Loading fills in what is missing from what the configuration ties.
- ``share_encoder_decoder_embeddings`` ties both sides' embeddings to ``model.shared``; ``tie_word_embeddings``
  (default true) ties ``lm_head`` to the target embedding. transformers 5 ties nothing at all when
  ``tie_word_embeddings`` is false, even with a shared vocabulary; no opus-mt model is built so, and it is refused.
- weights are read with safetensors, which parses a header and copies bytes. A ``pytorch_model.bin`` is a
  pickle, which can run code when loaded: it is refused, with the command that converts it.
"""
import json
import os
import warnings

import numpy as np

from . import _arguments, _hf_directory
from ._hf_directory import CONFIG_NAME, WEIGHTS_NAME, PretrainedError
from .checkpoint import _check_layout

__all__ = ["load_pretrained", "save_pretrained", "read_config", "transformer_config", "read_weights",
           "complete_state", "hf_config", "PretrainedError"]

INDEX_NAME = "model.safetensors.index.json"


def read_config(path):
    """config.json as a dict, after checking that it describes a MarianMTModel ctransformer can build."""
    config = _hf_directory.read_config(path, "from_pretrained", "marian", "MarianMTModel, the opus-mt translators")
    file = os.path.join(path, CONFIG_NAME)
    d_model = config.get("d_model", 1024)
    for key in ("encoder_attention_heads", "decoder_attention_heads"):
        heads = config.get(key, 16)
        if not isinstance(heads, int) or heads <= 0 or d_model % heads:
            raise PretrainedError(f"from_pretrained: {file} has {key} = {heads!r}, which does not divide d_model = "
                                  f"{d_model} into heads (MarianAttention refuses it too)")
    share = config.get("share_encoder_decoder_embeddings", True)
    if share and not config.get("tie_word_embeddings", True):
        raise PretrainedError(f"from_pretrained: {file} shares the encoder's and decoder's embeddings but does not "
                              "tie the output to them (tie_word_embeddings false); transformers then ties none of "
                              "them, a layout ctransformer does not build")
    for key in ("encoder_layerdrop", "decoder_layerdrop"):
        if config.get(key, 0.0):
            warnings.warn(f"from_pretrained: {key} = {config[key]} is not implemented; training runs every layer",
                          stacklevel=3)
    return config


def transformer_config(config):
    """The TransformerConfig for a Marian config.json (as a dict; MarianConfig's defaults where a key is absent)."""
    from ._core.nn import TransformerConfig

    vocab = config.get("vocab_size", 58101)
    pad = config.get("pad_token_id", 58100)
    c = TransformerConfig.marian(
        vocab=vocab, trg_vocab=config.get("decoder_vocab_size") or vocab, d_model=config.get("d_model", 1024),
        d_inner=config.get("encoder_ffn_dim", 4096), n_layers=config.get("encoder_layers", 12),
        n_head=config.get("encoder_attention_heads", 16), decoder_n_layers=config.get("decoder_layers", 12),
        decoder_n_head=config.get("decoder_attention_heads", 16), decoder_d_inner=config.get("decoder_ffn_dim", 4096),
        n_position=config.get("max_position_embeddings", 1024),
        pad_idx=pad, share=config.get("share_encoder_decoder_embeddings", True),
        tie=config.get("tie_word_embeddings", True), activation=config.get("activation_function", "gelu"),
        scale_embedding=config.get("scale_embedding", False), dropout=config.get("dropout", 0.1),
        attention_dropout=config.get("attention_dropout", 0.0),
        activation_dropout=config.get("activation_dropout", 0.0))
    c.decoder_start_idx = config.get("decoder_start_token_id", pad)
    c.validate()
    return c


def _weight_files(path):
    single, index = os.path.join(path, WEIGHTS_NAME), os.path.join(path, INDEX_NAME)
    if os.path.isfile(single):
        return [single]
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            weight_map = json.load(f).get("weight_map", {})
        return [os.path.join(path, name) for name in sorted(set(weight_map.values()))]
    _hf_directory.refuse_pickles(path, "from_pretrained", "MarianMTModel")
    raise FileNotFoundError(f"from_pretrained: {path} has no {WEIGHTS_NAME}")


def read_weights(path):
    """{name: float32 array} from the directory's safetensors file(s), without executing anything."""
    from safetensors.numpy import load_file

    state = {}
    for file in _weight_files(path):
        _check_layout(file)
        for name, value in load_file(file).items():
            if value.dtype not in (np.float32, np.float16, np.float64):
                raise PretrainedError(f"from_pretrained: {file}: tensor {name!r} is {value.dtype}; ctransformer "
                                      "loads float32 (or float16/float64, converted)")
            state[name] = value.astype(np.float32, copy=False)
    return state


def complete_state(state, model):
    """Fill in what a saved file leaves out, from what the configuration ties: the tied embeddings and output,
    the positional tables (recomputed) and a zero final_logits_bias."""
    c = model.config
    ours = model.state_dict()
    state = dict(state)
    embeddings = ["model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"]
    if c.emb_src_trg_weight_sharing:
        source = next((k for k in ["model.shared.weight", *embeddings] if k in state), None)
        if source is not None:
            for k in ["model.shared.weight", *embeddings]:
                state.setdefault(k, state[source])
    if c.trg_emb_prj_weight_sharing:
        if "model.decoder.embed_tokens.weight" in state:
            state.setdefault("lm_head.weight", state["model.decoder.embed_tokens.weight"])
        elif "lm_head.weight" in state:
            state["model.decoder.embed_tokens.weight"] = state["lm_head.weight"]
            if c.emb_src_trg_weight_sharing:
                for k in ["model.shared.weight", "model.encoder.embed_tokens.weight"]:
                    state.setdefault(k, state["lm_head.weight"])
    for k in ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight", "final_logits_bias"):
        state.setdefault(k, ours[k])
    tied = [k for k in ["model.shared.weight", *embeddings, "lm_head.weight"] if k in state]
    _check_ties(state, tied, c)
    return state


def _check_ties(state, names, c):
    """Names the configuration ties must hold equal values: otherwise the file is not what config.json says."""
    groups = []
    if c.emb_src_trg_weight_sharing:
        groups.append([n for n in names if n != "lm_head.weight"])
    if c.trg_emb_prj_weight_sharing:
        groups.append([n for n in names if n in ("model.decoder.embed_tokens.weight", "lm_head.weight")])
    for group in groups:
        for name in group[1:]:
            a, b = state[group[0]], state[name]
            if a.shape != b.shape or not np.array_equal(a, b):
                raise PretrainedError(f"from_pretrained: {group[0]} and {name} are tied by config.json but the "
                                      "weights file holds different values")


def load_pretrained(path):
    """A Hugging Face Marian directory as a Transformer in eval mode (its state_dict names are Hugging Face's)."""
    from ._core.nn import Transformer, skip_init

    path = _arguments.path(path, "from_pretrained: path")
    config = read_config(path)
    # Every parameter is loaded below (strictly; the positional tables and final_logits_bias are computed, not
    # drawn): no initialisation to draw.
    model = skip_init(Transformer, transformer_config(config))
    state = complete_state(read_weights(path), model)
    try:
        model.load_state_dict(state)
    except RuntimeError as error:   # torch's kind for a shape or key mismatch; here the file and config.json disagree
        message = str(error)
        raise PretrainedError(f"from_pretrained: the weights in {path} do not fit its config.json: "
                              f"{message[:400]}{' ...' if len(message) > 400 else ''}") from None
    model.eval()
    return model


def _short(value):
    """A float32 setting as the decimal it was written as (0.1, not 0.10000000149011612)."""
    return float(f"{value:.7g}")


def hf_config(model, eos_token_id=0, extra=None):
    """config.json's contents for a Marian-layout Transformer (MarianConfig's names)."""
    c = model.config
    if c.layout != "marian":
        raise ValueError(f"save_pretrained: the model's layout is {c.layout!r}; only a 'marian' model saves in "
                         "Hugging Face's format")
    enc, dec = c.encoder_side(), c.decoder_side()
    for side, name in ((enc, "encoder"), (dec, "decoder")):
        if side.d_k != side.d_v or side.d_k * side.n_head != c.d_model:
            raise ValueError(f"save_pretrained: the {name}'s heads ({side.n_head} of d_k {side.d_k}, d_v {side.d_v}) "
                             f"do not split d_model = {c.d_model}, as MarianAttention's must")
    out = {
        "architectures": ["MarianMTModel"], "model_type": "marian",
        "vocab_size": c.n_src_vocab, "decoder_vocab_size": c.n_trg_vocab, "d_model": c.d_model,
        "encoder_layers": enc.n_layers, "decoder_layers": dec.n_layers, "encoder_ffn_dim": enc.d_inner,
        "decoder_ffn_dim": dec.d_inner, "encoder_attention_heads": enc.n_head, "decoder_attention_heads": dec.n_head,
        "max_position_embeddings": c.n_position,
        "activation_function": "swish" if c.activation == "silu" else c.activation,   # opus-mt's spelling
        "dropout": _short(c.dropout), "attention_dropout": _short(c.attn_dropout),
        "activation_dropout": _short(c.activation_dropout), "scale_embedding": c.scale_emb_or_prj == "emb",
        "pad_token_id": c.trg_pad_idx,
        "decoder_start_token_id": c.trg_pad_idx if c.decoder_start_idx is None else c.decoder_start_idx,
        "eos_token_id": eos_token_id, "forced_eos_token_id": eos_token_id, "bos_token_id": None,
        "share_encoder_decoder_embeddings": c.emb_src_trg_weight_sharing,
        "tie_word_embeddings": c.trg_emb_prj_weight_sharing, "is_encoder_decoder": True,
        "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0, "use_cache": True,
    }
    out.update(extra or {})
    return out


def save_pretrained(model, path, eos_token_id=0, config_extra=None):
    """Write config.json and model.safetensors (Hugging Face's names; the tied copies and the positional tables
    left out, as transformers saves them) into the directory `path`, created if needed."""
    _arguments.transformer(model, "save_pretrained: model")
    path = _arguments.path(path, "save_pretrained: path")
    _arguments.mapping(config_extra, "save_pretrained: config_extra")
    config = hf_config(model, eos_token_id, config_extra)
    if model.quantization:
        raise ValueError("save_pretrained: the model is quantised to int8; Hugging Face's format holds float32 "
                         "weights (save it before quantize(), or call dequantize())")
    c = model.config
    skip = {"model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"}
    if c.emb_src_trg_weight_sharing:
        skip |= {"model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"}
    if c.trg_emb_prj_weight_sharing:
        skip.add("lm_head.weight")
    state = {k: np.ascontiguousarray(v) for k, v in model.state_dict().items() if k not in skip}
    return _hf_directory.write(path, state, config)
