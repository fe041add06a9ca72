"""Export a trained Transformer to other inference engines.

A Marian model (``TransformerConfig.marian``, ``nn.Transformer.from_pretrained``) is written as CTranslate2's
own converter writes a Hugging Face opus-mt model (``_build_marian_spec``): its vocabulary may be given as the
model's ``MarianTokenizer``. The rest of this note is about the post-norm Transformer.

``to_ctranslate2(model, path, vocabulary)`` writes the post-norm Transformer (``nn.Transformer``) as a
CTranslate2 model directory, so a translation service can run it with CTranslate2's ``Translator``.
CTranslate2's Transformer spec expresses every part of the post-norm Transformer:

- post-norm layers (``pre_norm=False``: residual add, then LayerNorm) with no final LayerNorm;
- bias-free attention projections: the spec's linears take an optional bias, left unset; its
  self-attention takes q, k and v as one fused (3 d, d) weight, its cross-attention q alone and
  k, v fused;
- the LayerNorm applied after embedding + position encoding (``layernorm_embedding``);
- jadore801120's sinusoid table, stored as explicit position encodings (CTranslate2's own sinusoids put
  all sines before all cosines; jadore801120's reference interleaves them);
- ``scale_emb_or_prj='prj'``: the logits times d_model^-1/2, folded into the output projection's
  weight (the projection then no longer equals the target embedding, so the two are stored apart);
  ``'emb'``: CTranslate2's own embedding scaling by d_model^1/2.

Only the weights are converted, never re-derived: a CTranslate2 float32 model decodes the same
tokens as ctransformer's greedy_decode and scores a target with the same log-probabilities to 2e-5
(tests/checkpoint/test_export.py). Pass ``min_decoding_length=0`` to ``translate_batch`` for the same tokens
throughout: CTranslate2's default (1) forbids an empty translation, ctransformer does not. Quantise at load time,
``ctranslate2.Translator(path, compute_type="int8")``, or with ``quantization="int8"`` here.

A model quantised to int8 (``model.quantize("int8")``) is written with its own int8 weights: CTranslate2's int8
rule per output row is ours (q = rint(w * (127 / amax))), and it stores the inverse scale, so each Linear
becomes ``weight`` = our q and ``weight_scale`` = 1 / our scale (float32; the output projection's
d_model^-1/2 folded into it). The embeddings stay float32, as in our model. CTranslate2 then runs the same
int8 weights (tests/checkpoint/test_export.py).
ctranslate2 is an optional dependency (``pip install ctransformer[export]``).
"""
import numpy as np

from . import _arguments

__all__ = ["to_ctranslate2"]


def _ctranslate2():
    try:
        import ctranslate2
        from ctranslate2.specs import transformer_spec
    except ImportError as e:  # pragma: no cover - exercised only without the extra installed
        raise ImportError("to_ctranslate2 needs the ctranslate2 package: pip install ctranslate2 "
                          "(or ctransformer[export])") from e
    return ctranslate2, transformer_spec


def _check_supported(cfg):
    """The post-norm Transformer's settings CTranslate2's spec can express; anything else is refused by name."""
    wanted = {"layout": "post_norm", "norm_first": False, "qkv_bias": False, "output_bias": False,
              "embed_layer_norm": True, "pe_formula": "paired", "scale_after_matmul": False}
    for name, value in wanted.items():
        if getattr(cfg, name) != value:
            raise ValueError(f"to_ctranslate2: model.config.{name} is {getattr(cfg, name)!r}; only the post-norm "
                             f"Transformer's {name}={value!r} is supported")
    for side in ("encoder", "decoder"):
        sizes = getattr(cfg, side + "_side")()
        if sizes.d_k != sizes.d_v:
            raise ValueError(f"to_ctranslate2: the {side}'s d_k ({sizes.d_k}) must equal its d_v ({sizes.d_v}): "
                             "CTranslate2 has one head size")


def _check_vocabulary(name, tokens, size):
    if isinstance(tokens, (str, bytes)) or not hasattr(tokens, "__iter__"):
        raise TypeError(f"to_ctranslate2: {name} must be a list of str (or a MarianTokenizer), got "
                        f"{type(tokens).__name__}")
    tokens = list(tokens)
    if len(tokens) != size:
        raise ValueError(f"to_ctranslate2: {name} has {len(tokens)} tokens, the model's vocabulary has {size}")
    if not all(isinstance(t, str) for t in tokens):
        raise TypeError(f"to_ctranslate2: {name} must be a list of str")
    if len(set(tokens)) != len(tokens):
        raise ValueError(f"to_ctranslate2: {name} has duplicate tokens")
    return tokens


def _int8_weights(model):
    """{linear name: (q, scale)} of a quantised model's Linears."""
    from .checkpoint import _linears

    return {name: (lin.int8_weight.q, lin.int8_weight.scale) for name, lin in _linears(model)
            if lin.int8_weight is not None}


def _build_spec(model, transformer_spec, tokens):
    """The TransformerSpec holding model's weights (float32 copies; a quantised model's Linears in int8)."""
    cfg = model.config
    sd = {k: np.asarray(v, dtype=np.float32) for k, v in model.state_dict().items()}
    int8 = _int8_weights(model)

    def int8_linear(spec, names, alpha=np.float32(1)):
        """CTranslate2 dequantises q / weight_scale; ours is q * scale (a zero row: scale 0, CTranslate2's 1)."""
        scale = np.concatenate([int8[n][1] for n in names]) * alpha
        spec.weight = np.concatenate([int8[n][0] for n in names], axis=0)
        spec.weight_scale = np.where(scale > 0, np.float32(1) / np.where(scale > 0, scale, 1), 1).astype(np.float32)
    # Each side its own layers, heads and head size (CTranslate2 reads num_heads per scope). The post-norm
    # Transformer scales the scores by 1 / sqrt(d_k), as CTranslate2 does by 1 / sqrt(head_dim).
    e, d = cfg.encoder_side(), cfg.decoder_side()
    enc = transformer_spec.TransformerEncoderSpec(e.n_layers, e.n_head, pre_norm=False,
                                                  layernorm_embedding=True, head_dim=int(e.d_k))
    dec = transformer_spec.TransformerDecoderSpec(d.n_layers, d.n_head, pre_norm=False,
                                                  layernorm_embedding=True, head_dim=int(d.d_k))
    scale_emb = cfg.scale_emb_or_prj == "emb" and cfg.trg_emb_prj_weight_sharing
    scale_prj = cfg.scale_emb_or_prj == "prj" and cfg.trg_emb_prj_weight_sharing

    def linear(spec, *names, bias=False):
        if all(n in int8 for n in names):
            int8_linear(spec, names)
        else:
            spec.weight = np.concatenate([sd[n + ".weight"] for n in names], axis=0)
        if bias:
            spec.bias = np.concatenate([sd[n + ".bias"] for n in names], axis=0)

    def layer_norm(spec, name):
        spec.gamma, spec.beta = sd[name + ".weight"], sd[name + ".bias"]

    def attention(spec, prefix, self_attention):
        if self_attention:
            linear(spec.linear[0], f"{prefix}.w_qs", f"{prefix}.w_ks", f"{prefix}.w_vs")
            linear(spec.linear[1], f"{prefix}.fc")
        else:
            linear(spec.linear[0], f"{prefix}.w_qs")
            linear(spec.linear[1], f"{prefix}.w_ks", f"{prefix}.w_vs")
            linear(spec.linear[2], f"{prefix}.fc")
        layer_norm(spec.layer_norm, f"{prefix}.layer_norm")

    def feed_forward(spec, prefix):
        linear(spec.linear_0, f"{prefix}.w_1", bias=True)
        linear(spec.linear_1, f"{prefix}.w_2", bias=True)
        layer_norm(spec.layer_norm, f"{prefix}.layer_norm")

    def stack(spec, side, embedding):
        emb = spec.embeddings[0] if side == "encoder" else spec.embeddings
        emb.weight = sd[f"{side}.{embedding}.weight"]
        spec.scale_embeddings = bool(scale_emb)
        spec.position_encodings.encodings = sd[f"{side}.position_enc.pos_table"][0]
        layer_norm(spec.layernorm_embedding, f"{side}.layer_norm")
        for i, layer in enumerate(spec.layer):
            p = f"{side}.layer_stack.{i}"
            attention(layer.self_attention, f"{p}.slf_attn", True)
            if side == "decoder":
                attention(layer.attention, f"{p}.enc_attn", False)
            feed_forward(layer.ffn, f"{p}.pos_ffn")

    stack(enc, "encoder", "src_word_emb")
    stack(dec, "decoder", "trg_word_emb")
    projection = sd["trg_word_prj.weight"]
    if "trg_word_prj" in int8:
        int8_linear(dec.projection, ["trg_word_prj"], np.float32(cfg.d_model ** -0.5) if scale_prj else np.float32(1))
    else:
        dec.projection.weight = projection * np.float32(cfg.d_model ** -0.5) if scale_prj else projection

    spec = transformer_spec.TransformerSpec(enc, dec)
    spec.config.layer_norm_epsilon = float(cfg.layer_norm_eps)
    src_tokens, trg_tokens = tokens
    spec.register_source_vocabulary(src_tokens)
    spec.register_target_vocabulary(trg_tokens)
    return spec


def _build_marian_spec(model, transformer_spec, tokens):
    """The TransformerSpec of a Marian-layout model, as CTranslate2's own MarianMTLoader builds it: biased
    projections, the activation, no embedding LayerNorm, Hugging Face's positional table, final_logits_bias as
    the output bias. The pad token (the last id) leaves the vocabulary, and the decoder starts from a zero
    embedding, which is what Hugging Face's pad row holds (padding_idx: zero, and never trained)."""
    from ctranslate2.specs import common_spec

    cfg = model.config
    sd = {k: np.asarray(v, dtype=np.float32) for k, v in model.state_dict().items()}
    pad = cfg.trg_pad_idx
    if pad != cfg.n_trg_vocab - 1 or pad != cfg.n_src_vocab - 1:
        raise ValueError(f"to_ctranslate2: a Marian model's pad id must be its last (CTranslate2 drops it from the "
                         f"vocabulary), got pad {pad} of {cfg.n_src_vocab} / {cfg.n_trg_vocab}")
    for name in ("model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"):
        if name in sd and np.any(sd[name][pad]):
            raise ValueError(f"to_ctranslate2: {name}'s pad row is not zero; CTranslate2 starts the decoder from a "
                             "zero embedding where Hugging Face reads that row")
    if model.quantization is not None:
        raise ValueError("to_ctranslate2: write a Marian model in float32 (quantization='int8' quantises it in "
                         "CTranslate2's converter)")
    activation = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
                  "gelu_new": common_spec.Activation.GELUTanh, "silu": common_spec.Activation.SWISH}[cfg.activation]
    # Each side its own layers and heads. CTranslate2's own converter (TransformerSpec.from_config with
    # encoder_attention_heads) gives the decoder the encoder's head count; a model whose sides differ in heads
    # then computes a different decoder there, and here it does not.
    e, d = cfg.encoder_side(), cfg.decoder_side()
    enc = transformer_spec.TransformerEncoderSpec(e.n_layers, e.n_head, pre_norm=False, activation=activation)
    dec = transformer_spec.TransformerDecoderSpec(d.n_layers, d.n_head, pre_norm=False, activation=activation)

    def linear(spec, *names):
        spec.weight = np.concatenate([sd[n + ".weight"] for n in names], axis=0)
        spec.bias = np.concatenate([sd[n + ".bias"] for n in names], axis=0)

    def layer_norm(spec, name):
        spec.gamma, spec.beta = sd[name + ".weight"], sd[name + ".bias"]

    def stack(spec, side):
        p = f"model.{side}"
        emb = spec.embeddings[0] if side == "encoder" else spec.embeddings
        emb.weight = sd[f"{p}.embed_tokens.weight"][:-1]
        spec.scale_embeddings = cfg.scale_emb_or_prj == "emb"
        spec.position_encodings.encodings = sd[f"{p}.embed_positions.weight"]
        for i, layer in enumerate(spec.layer):
            q = f"{p}.layers.{i}"
            a = f"{q}.self_attn"
            linear(layer.self_attention.linear[0], f"{a}.q_proj", f"{a}.k_proj", f"{a}.v_proj")
            linear(layer.self_attention.linear[1], f"{a}.out_proj")
            layer_norm(layer.self_attention.layer_norm, f"{q}.self_attn_layer_norm")
            if side == "decoder":
                a = f"{q}.encoder_attn"
                linear(layer.attention.linear[0], f"{a}.q_proj")
                linear(layer.attention.linear[1], f"{a}.k_proj", f"{a}.v_proj")
                linear(layer.attention.linear[2], f"{a}.out_proj")
                layer_norm(layer.attention.layer_norm, f"{q}.encoder_attn_layer_norm")
            linear(layer.ffn.linear_0, f"{q}.fc1")
            linear(layer.ffn.linear_1, f"{q}.fc2")
            layer_norm(layer.ffn.layer_norm, f"{q}.final_layer_norm")

    stack(enc, "encoder")
    stack(dec, "decoder")
    dec.start_from_zero_embedding = True
    dec.projection.weight = sd["lm_head.weight"][:-1]
    dec.projection.bias = sd["final_logits_bias"][0, :-1]
    spec = transformer_spec.TransformerSpec(enc, dec)
    spec.config.layer_norm_epsilon = float(cfg.layer_norm_eps)
    src_tokens, trg_tokens = tokens
    spec.register_source_vocabulary(src_tokens[:-1])
    spec.register_target_vocabulary(trg_tokens[:-1])
    return spec


def to_ctranslate2(model, path, vocabulary, *, target_vocabulary=None, unk_token="<unk>", bos_token="<s>",
                   eos_token="</s>", quantization=None, force=False):
    """Write `model` (the post-norm ``nn.Transformer``) as a CTranslate2 model directory at `path`.

    vocabulary: the source tokens as a list of str, token i for id i (for a sentencepiece model
    ``[sp.id_to_piece(i) for i in range(sp.get_piece_size())]``); with shared embeddings the target
    uses it too, else pass target_vocabulary. unk_token, bos_token and eos_token name the tokens
    CTranslate2 treats as such: the decoder starts from bos_token and a hypothesis ends at
    eos_token, as ``decode.greedy_decode(..., start_symbol=bos id, end_symbol=eos id)``; sources are
    passed as they are (no bos/eos added). quantization: None (float32, or a quantised model's own int8), or
    a CTranslate2 scheme such as "int8" for a float32 model. force: replace an existing directory. Returns path.
    """
    _arguments.transformer(model, "to_ctranslate2: model")
    path = _arguments.path(path, "to_ctranslate2: path")
    _arguments.flag(force, "to_ctranslate2: force")
    ctranslate2, transformer_spec = _ctranslate2()
    cfg = model.config
    if cfg.layout == "marian":
        return _marian_to_ctranslate2(ctranslate2, transformer_spec, model, path, vocabulary, target_vocabulary,
                                      quantization, force)
    _check_supported(cfg)
    if model.quantization is not None and quantization is not None:
        raise ValueError(f"to_ctranslate2: the model is quantised to {model.quantization} and is written with its own "
                         f"int8 weights; pass quantization=None (CTranslate2 would quantise them again, to {quantization!r})")
    src_tokens = _check_vocabulary("vocabulary", vocabulary, cfg.n_src_vocab)
    trg_tokens = _check_vocabulary("target_vocabulary", vocabulary if target_vocabulary is None
                                   else target_vocabulary, cfg.n_trg_vocab)
    for name, token in (("unk_token", unk_token), ("bos_token", bos_token), ("eos_token", eos_token)):
        if token not in trg_tokens:
            raise ValueError(f"to_ctranslate2: {name} {token!r} is not in the target vocabulary")

    class _Converter(ctranslate2.converters.Converter):
        def _load(self):
            spec = _build_spec(model, transformer_spec, (src_tokens, trg_tokens))
            spec.config.unk_token, spec.config.bos_token = unk_token, bos_token
            spec.config.eos_token, spec.config.decoder_start_token = eos_token, bos_token
            return spec

    return _Converter().convert(str(path), quantization=quantization, force=force)


def _marian_to_ctranslate2(ctranslate2, transformer_spec, model, path, vocabulary, target_vocabulary, quantization,
                           force):
    """A Marian model: its vocabulary is a MarianTokenizer (or lists of tokens by id); </s> ends a translation and
    the decoder's start token is CTranslate2's choice for Marian (</s> over a zero embedding)."""
    from .data.marian_tokenizer import MarianTokenizer

    cfg = model.config
    if isinstance(vocabulary, MarianTokenizer):
        tok = vocabulary
        vocabulary = _tokens_by_id(tok.source_vocab, cfg.n_src_vocab, "vocab.json")
        target_vocabulary = _tokens_by_id(tok.target_vocab, cfg.n_trg_vocab, "the target vocabulary")
    src_tokens = _check_vocabulary("vocabulary", vocabulary, cfg.n_src_vocab)
    trg_tokens = _check_vocabulary("target_vocabulary", vocabulary if target_vocabulary is None
                                   else target_vocabulary, cfg.n_trg_vocab)
    for token in ("</s>", "<unk>"):
        if token not in trg_tokens:
            raise ValueError(f"to_ctranslate2: {token!r} is not in the target vocabulary")

    class _Converter(ctranslate2.converters.Converter):
        def _load(self):
            spec = _build_marian_spec(model, transformer_spec, (src_tokens, trg_tokens))
            spec.config.unk_token, spec.config.eos_token = "<unk>", "</s>"
            spec.config.bos_token = spec.config.decoder_start_token = "</s>"
            return spec

    return _Converter().convert(str(path), quantization=quantization, force=force)


def _tokens_by_id(vocab, size, what):
    tokens = [None] * size
    for piece, i in vocab.items():
        if not 0 <= i < size:
            raise ValueError(f"to_ctranslate2: {what} maps {piece!r} to id {i}, outside the model's {size} ids")
        tokens[i] = piece
    if None in tokens:
        raise ValueError(f"to_ctranslate2: {what} has no token for id {tokens.index(None)}")
    return tokens
