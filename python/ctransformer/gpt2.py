"""Hugging Face GPT-2 directories: ``config.json`` and ``model.safetensors`` in and out of ``ct.nn.GPT``.

``load_pretrained(path)`` (``ct.nn.GPT.from_pretrained``) reads a directory that ``GPT2LMHeadModel.save_pretrained``
(or ``GPT2Model``'s) wrote, or that was downloaded from the Hugging Face Hub; ``save_pretrained(model, path)``
(``GPT.save_pretrained``) writes one that ``transformers`` loads. ``causal_lm_loss`` is transformers' loss of a
``GPT2LMHeadModel(input_ids, labels=labels)``, and ``GPT2Tokenizer`` the byte-level BPE of the directory.

ctransformer's GPT is GPT-2's block already: pre-norm layers (``ln_1`` -> attention, ``ln_2`` -> MLP), a final
LayerNorm and learned positions; GPT-2's variants are its keywords, under GPT2Config's names (``layer_norm_epsilon``,
``activation_function``, ``scale_attn_weights``, ``scale_attn_by_inverse_layer_idx``, ``tie_word_embeddings``).
``reorder_and_upcast_attn`` computes the scores in float32, as ctransformer always does, and is taken whatever its
value. What this module knows of transformers' side (``modeling_gpt2.py``):
- its Linears are ``Conv1D``s, whose weight is stored (in, out), the transpose of a Linear's; ``attn.c_attn``
  holds q, k and v side by side in one (d, 3d) weight, split here into ``q_layer``, ``k_layer``, ``v_layer``;
- a ``GPT2LMHeadModel`` file names its weights ``transformer.h.0...``, a ``GPT2Model`` file ``h.0...``; both load;
  ``lm_head.weight`` is the tied ``wte`` and is left out when saved (an untied head's is kept, and loads into
  ``language_model_head.weight``); older files hold ``attn.bias`` and
  ``attn.masked_bias`` (the causal mask as a buffer), which are ignored;
- ``n_inner`` unset is 4 * ``n_embd``; float16 and bfloat16 files are cast to float32.
What ctransformer's GPT cannot compute is refused by its field's name: cross-attention, an activation outside
relu, gelu, gelu_new, gelu_pytorch_tanh, silu and swish.
"""
import json
import os
import warnings

import numpy as np

from . import _arguments, _hf_directory
from ._hf_directory import CONFIG_NAME, WEIGHTS_NAME, PretrainedError
from .checkpoint import _check_layout

__all__ = ["load_pretrained", "save_pretrained", "read_config", "gpt_arguments", "hf_config", "causal_lm_loss",
           "GPT2Tokenizer", "PretrainedError"]

IGNORE_INDEX = -100   # transformers' label that no loss counts
# transformers' ACT2FN names the GPT computes (gelu_new and gelu_pytorch_tanh are the same tanh form; swish is silu)
ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh", "gelu", "relu", "silu", "swish")


def read_config(path):
    """config.json as a dict, after checking that ctransformer's GPT computes the model it describes."""
    config = _hf_directory.read_config(path, "GPT.from_pretrained", "gpt2", "GPT2LMHeadModel, GPT2Model")
    file = os.path.join(path, CONFIG_NAME)
    epsilon = config.get("layer_norm_epsilon", 1e-5)
    refused = {
        "activation_function": (config.get("activation_function", "gelu_new") in ACTIVATIONS,
                                f"ctransformer's GPT computes {', '.join(ACTIVATIONS)}"),
        "layer_norm_epsilon": (isinstance(epsilon, (int, float)) and not isinstance(epsilon, bool) and
                               0 < epsilon < float("inf"), "LayerNorm's eps must be a positive number"),
        "add_cross_attention": (not config.get("add_cross_attention", False),
                                "ctransformer's GPT has no cross-attention"),
    }
    for field in ("scale_attn_weights", "scale_attn_by_inverse_layer_idx", "tie_word_embeddings",
                  "reorder_and_upcast_attn"):
        refused[field] = (isinstance(config.get(field, False), bool), "expected true or false")
    for field, (ok, why) in refused.items():
        if not ok:
            raise PretrainedError(f"GPT.from_pretrained: {file} has {field} = {config.get(field)!r}; {why}")
    n_embd, n_head = config.get("n_embd", 768), config.get("n_head", 12)
    if not isinstance(n_head, int) or n_head <= 0 or n_embd % n_head:
        raise PretrainedError(f"GPT.from_pretrained: {file} has n_head = {n_head!r}, which does not split n_embd = "
                              f"{n_embd} into heads")
    drops = {k: config.get(k, 0.1) for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop")}
    if len(set(drops.values())) > 1:
        warnings.warn(f"GPT.from_pretrained: {file} has dropouts {drops}; ctransformer's GPT has one rate, and "
                      f"trains with resid_pdrop = {drops['resid_pdrop']} everywhere", stacklevel=3)
    return config


def gpt_arguments(config):
    """ct.nn.GPT's keyword arguments for a GPT-2 config.json (GPT2Config's defaults where a key is absent)."""
    n_embd = config.get("n_embd", 768)
    return dict(vocab_size=config.get("vocab_size", 50257), max_seq_len=config.get("n_positions", 1024),
                n_layers=config.get("n_layer", 12), d_model=n_embd, n_head=config.get("n_head", 12),
                d_inner=config.get("n_inner") or 4 * n_embd, dropout=config.get("resid_pdrop", 0.1),
                layer_norm_epsilon=config.get("layer_norm_epsilon", 1e-5),
                activation_function=config.get("activation_function", "gelu_new"),
                scale_attn_weights=config.get("scale_attn_weights", True),
                scale_attn_by_inverse_layer_idx=config.get("scale_attn_by_inverse_layer_idx", False),
                tie_word_embeddings=config.get("tie_word_embeddings", True))


# transformers' name (after "h.{i}.") -> (ours, after "transformer.{i}.", whether the weight is a Conv1D's).
_LAYER_NAMES = {
    "ln_1.weight": ("norm1.weight", False), "ln_1.bias": ("norm1.bias", False),
    "attn.c_proj.weight": ("attn.proj_layer.weight", True), "attn.c_proj.bias": ("attn.proj_layer.bias", False),
    "ln_2.weight": ("norm2.weight", False), "ln_2.bias": ("norm2.bias", False),
    "mlp.c_fc.weight": ("ffn.fc1.weight", True), "mlp.c_fc.bias": ("ffn.fc1.bias", False),
    "mlp.c_proj.weight": ("ffn.fc2.weight", True), "mlp.c_proj.bias": ("ffn.fc2.bias", False),
}
_TOP_NAMES = {"wte.weight": "word_token_embedding.weight", "wpe.weight": "word_pos_embedding.weight",
              "ln_f.weight": "norm.weight", "ln_f.bias": "norm.bias"}


def _weight_file(path):
    single = os.path.join(path, WEIGHTS_NAME)
    if os.path.isfile(single):
        return single
    _hf_directory.refuse_pickles(path, "GPT.from_pretrained", "GPT2LMHeadModel")
    raise FileNotFoundError(f"GPT.from_pretrained: {path} has no {WEIGHTS_NAME}")


def read_weights(path):
    """{transformers' name without the ``transformer.`` prefix: float32 array}, the causal-mask buffers left out."""
    from safetensors.numpy import load_file

    file = _weight_file(path)
    _check_layout(file)
    try:
        raw = load_file(file)
    except Exception as error:   # bfloat16 has no NumPy dtype: read those tensors through their bytes
        if "bf16" not in str(error).lower() and "bfloat16" not in str(error).lower():
            raise
        raw = _load_bfloat16(file)
    state = {}
    for name, value in raw.items():
        key = name[len("transformer."):] if name.startswith("transformer.") else name
        if key.endswith((".attn.bias", ".attn.masked_bias")):
            continue
        if value.dtype not in (np.float32, np.float16, np.float64):
            raise PretrainedError(f"GPT.from_pretrained: {file}: tensor {name!r} is {value.dtype}; ctransformer "
                                  "loads float32 (or float16/bfloat16/float64, converted)")
        state[key] = value.astype(np.float32, copy=False)
    return state


def _load_bfloat16(file):
    """safetensors' bfloat16 tensors as float32 (the high half of each float32), the rest as stored."""
    import struct

    with open(file, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        data = f.read()
    dtypes = {"F32": np.float32, "F16": np.float16, "F64": np.float64}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        chunk = data[start:end]
        if info["dtype"] == "BF16":
            high = np.frombuffer(chunk, dtype=np.uint16).astype(np.uint32) << 16
            out[name] = high.view(np.float32).reshape(info["shape"])
        elif info["dtype"] in dtypes:
            out[name] = np.frombuffer(chunk, dtype=dtypes[info["dtype"]]).reshape(info["shape"])
        else:
            raise PretrainedError(f"GPT.from_pretrained: {file}: tensor {name!r} is {info['dtype']}")
    return out


def to_ours(state, n_layers, d_model, tied=True):
    """transformers' GPT-2 state (prefix removed) as ct.nn.GPT's state_dict: Conv1D weights transposed, c_attn
    split into q, k and v; a tied lm_head checked against wte and dropped, an untied one kept as the head's."""
    ours, left = {}, dict(state)
    head = left.pop("lm_head.weight", None)
    for theirs, name in _TOP_NAMES.items():
        if theirs in left:
            ours[name] = left.pop(theirs)
    if tied and head is not None and "word_token_embedding.weight" in ours and not np.array_equal(
            head, ours["word_token_embedding.weight"]):
        raise PretrainedError("GPT.from_pretrained: lm_head.weight differs from transformer.wte.weight, and "
                              "config.json ties them (tie_word_embeddings is true)")
    if not tied and head is None:
        raise PretrainedError("GPT.from_pretrained: config.json unties the head (tie_word_embeddings false), and the "
                              "weights hold no lm_head.weight")
    for i in range(n_layers):
        p = f"h.{i}."
        for theirs, (name, conv) in _LAYER_NAMES.items():
            if p + theirs in left:
                value = left.pop(p + theirs)
                ours[f"transformer.{i}.{name}"] = np.ascontiguousarray(value.T) if conv else value
        for kind in ("weight", "bias"):
            key = p + f"attn.c_attn.{kind}"
            if key in left:
                value = left.pop(key)
                parts = np.split(value, 3, axis=-1)   # (d, 3d) -> three (d, d); (3d,) -> three (d,)
                for part, name in zip(parts, ("q_layer", "k_layer", "v_layer")):
                    ours[f"transformer.{i}.attn.{name}.{kind}"] = np.ascontiguousarray(part.T if kind == "weight"
                                                                                       else part)
    if left:
        extra = sorted(left)
        raise PretrainedError(f"GPT.from_pretrained: weights the configuration does not describe: {extra[:8]}"
                              f"{' ...' if len(extra) > 8 else ''}")
    ours["language_model_head.weight"] = ours.get("word_token_embedding.weight") if tied else head
    return {k: v for k, v in ours.items() if v is not None}


def to_theirs(state, n_layers, tied=True):
    """ct.nn.GPT's state_dict as a GPT2LMHeadModel file's weights (``transformer.`` names; a tied lm_head left
    out, an untied one kept)."""
    inverse_top = {ours: theirs for theirs, ours in _TOP_NAMES.items()}
    out = {} if tied else {"lm_head.weight": state["language_model_head.weight"]}
    for name, theirs in inverse_top.items():
        out["transformer." + theirs] = state[name]
    for i in range(n_layers):
        q = f"transformer.{i}."
        for theirs, (name, conv) in _LAYER_NAMES.items():
            value = state[q + name]
            out[f"transformer.h.{i}.{theirs}"] = np.ascontiguousarray(value.T) if conv else value
        out[f"transformer.h.{i}.attn.c_attn.weight"] = np.ascontiguousarray(
            np.concatenate([state[q + f"attn.{n}.weight"] for n in ("q_layer", "k_layer", "v_layer")], axis=0).T)
        out[f"transformer.h.{i}.attn.c_attn.bias"] = np.concatenate(
            [state[q + f"attn.{n}.bias"] for n in ("q_layer", "k_layer", "v_layer")])
    return out


def load_pretrained(path):
    """A Hugging Face GPT-2 directory as a ct.nn.GPT in eval mode."""
    from ._core.nn import skip_init
    from ._core.nn.gpt import GPT

    path = _arguments.path(path, "GPT.from_pretrained: path")
    config = read_config(path)
    arguments = gpt_arguments(config)
    model = skip_init(GPT, **arguments)   # every parameter is loaded below (strictly): no initialisation to draw
    state = to_ours(read_weights(path), arguments["n_layers"], arguments["d_model"],
                    arguments["tie_word_embeddings"])
    try:
        model.load_state_dict(state)
    except RuntimeError as error:   # a shape or key mismatch: the file and config.json disagree
        message = str(error)
        raise PretrainedError(f"GPT.from_pretrained: the weights in {path} do not fit its config.json: "
                              f"{message[:400]}{' ...' if len(message) > 400 else ''}") from None
    model.eval()
    return model


def hf_config(model, extra=None):
    """config.json's contents for a ct.nn.GPT (GPT2Config's names)."""
    if model.no_res or model.no_pos:
        raise ValueError("save_pretrained: a GPT built with no_res or no_pos is not a GPT-2 (every GPT-2 block has "
                         "its residual connections and learned positions)")
    rate = float(f"{model.drop.p:.7g}")
    out = {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": model.vocab_size,
        "n_positions": model.max_seq_len, "n_embd": model.d_model, "n_layer": model.n_layers, "n_head": model.n_head,
        "n_inner": model.d_inner, "activation_function": model.activation_function,
        "layer_norm_epsilon": float(f"{model.layer_norm_epsilon:.7g}"),   # the float32 eps as it was given
        "resid_pdrop": rate, "embd_pdrop": rate, "attn_pdrop": rate, "initializer_range": 0.02,
        "scale_attn_weights": model.scale_attn_weights,
        "scale_attn_by_inverse_layer_idx": model.scale_attn_by_inverse_layer_idx, "reorder_and_upcast_attn": False,
        "tie_word_embeddings": model.tie_word_embeddings, "use_cache": True,
    }
    out.update(extra or {})
    return out


def save_pretrained(model, path, config_extra=None):
    """Write config.json and model.safetensors as GPT2LMHeadModel.save_pretrained does (``transformer.`` names,
    Conv1D weights (in, out), q/k/v fused into c_attn, a tied lm_head left out) into `path`, created if needed.
    Returns path."""
    from ._core.nn.gpt import GPT

    if not isinstance(model, GPT):
        raise TypeError(f"save_pretrained: model must be a ct.nn.GPT, got {type(model).__name__}")
    path = _arguments.path(path, "save_pretrained: path")
    _arguments.mapping(config_extra, "save_pretrained: config_extra")
    if getattr(model, "quantization", None):
        raise ValueError("save_pretrained: the model is quantised to int8; Hugging Face's format holds float32 "
                         "weights (save it before quantize(), or call dequantize())")
    config = hf_config(model, config_extra)
    state = {k: np.asarray(v, dtype=np.float32) for k, v in model.state_dict().items()}
    return _hf_directory.write(path, to_theirs(state, model.n_layers, model.tie_word_embeddings), config)


def causal_lm_loss(model, input_ids, labels=None):
    """transformers' loss of ``GPT2LMHeadModel(input_ids, labels=labels)``: the logits at position t predict
    labels[t + 1] (the shift is done here, as transformers does it inside), labels of -100 count for nothing, and
    the mean is over the tokens that count. labels None: input_ids. Returns (loss, logits (b, t, vocab))."""
    from ._core import functional

    ids = np.asarray(input_ids)
    if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"causal_lm_loss: input_ids must be a (batch, length) integer array, got {ids.dtype} of "
                         f"shape {ids.shape}")
    labels = ids if labels is None else np.asarray(labels)
    if labels.shape != ids.shape:
        raise ValueError(f"causal_lm_loss: labels must have input_ids' shape {ids.shape}, got {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"causal_lm_loss: labels must be integers, got {labels.dtype}")
    bad = (labels != IGNORE_INDEX) & ((labels < 0) | (labels >= model.vocab_size))
    if bad.any():
        raise ValueError(f"causal_lm_loss: labels must be token ids in [0, {model.vocab_size}) or -100 (ignored), "
                         f"got {int(labels[bad][0])}")
    logits, _ = model(ids)
    shifted = np.concatenate([labels[:, 1:], np.full((labels.shape[0], 1), IGNORE_INDEX)], axis=1).astype(np.int64)
    loss = functional.cross_entropy(logits.reshape(-1, model.vocab_size), shifted.reshape(-1),
                                    ignore_index=IGNORE_INDEX)
    return loss, logits


def _chat_settings(path):
    """(chat template or None, bos_token, eos_token) of a directory's tokenizer_config.json."""
    try:
        with open(os.path.join(path, "tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return None, "", ""
    if not isinstance(config, dict):
        return None, "", ""
    template = config.get("chat_template")
    if isinstance(template, list):   # transformers' named templates: the one called "default"
        template = next((t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"),
                        None)
    token = lambda value: value.get("content", "") if isinstance(value, dict) else value or ""  # noqa: E731
    return (template if isinstance(template, str) and template else None, token(config.get("bos_token")),
            token(config.get("eos_token")))


class GPT2Tokenizer:
    """GPT-2's byte-level BPE from a directory's ``vocab.json`` and ``merges.txt`` (or its ``tokenizer.json``),
    through the ``tokenizers`` package: ``encode(text)`` gives the ids ``transformers.GPT2Tokenizer`` gives,
    ``decode(ids)`` the text back. Every byte has a token, so any text round-trips."""

    def __init__(self, path):
        try:
            import tokenizers
        except ImportError as e:   # pragma: no cover - exercised only without the package
            raise ImportError("GPT2Tokenizer needs the tokenizers package: pip install tokenizers "
                              "(or ctransformer[gpt2])") from e
        path = _arguments.path(path, "GPT2Tokenizer: path")
        vocab, merges = os.path.join(path, "vocab.json"), os.path.join(path, "merges.txt")
        if os.path.isfile(vocab) and os.path.isfile(merges):
            model = tokenizers.models.BPE.from_file(vocab, merges)
            self._tokenizer = tokenizers.Tokenizer(model)
            self._tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
            self._tokenizer.decoder = tokenizers.decoders.ByteLevel()
        elif os.path.isfile(os.path.join(path, "tokenizer.json")):
            self._tokenizer = tokenizers.Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
        else:
            raise FileNotFoundError(f"GPT2Tokenizer: {path} has neither vocab.json and merges.txt nor tokenizer.json")
        vocab_map = self._tokenizer.get_vocab()
        self.eos_token_id = vocab_map.get("<|endoftext|>")
        # tokenizer_config.json's chat template (a Jinja text; a named list of them: "default"), and the special
        # tokens it may name; None and "" without one.
        self.chat_template, self.bos_token, self.eos_token = _chat_settings(path)

    def __len__(self):
        return self._tokenizer.get_vocab_size()

    def encode(self, text):
        """The ids of `text` (a str), as a list of int."""
        if not isinstance(text, str):
            raise TypeError(f"GPT2Tokenizer.encode: text must be a str, got {type(text).__name__}")
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids):
        """The text of `ids` (an iterable of int)."""
        return self._tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)
