"""The decoder-only GPT and its parts, named as in the GPT reference.

``GPT(vocab_size, max_seq_len, num_layer, embed_dim, num_head, feedforward_dim, dropout,
no_res=False, no_pos=False)`` with ``forward(word_idx, targets=None)``,
``configure_optimizers(weight_decay)`` and ``generate(idx, max_new_tokens, temperature=1.0,
top_k=None, use_cache=True)`` (key/value-cached by default, see ``ctransformer.decode.generate``;
``use_cache=False`` is the GPT reference's loop); its blocks are ``TransformerLayer`` (``SelfAttention`` and ``FFN``).
"""
from .._core.nn.gpt import FFN, GPT, SelfAttention, TransformerLayer, TransformerLayerList

__all__ = ["GPT", "TransformerLayer", "TransformerLayerList", "SelfAttention", "FFN"]
