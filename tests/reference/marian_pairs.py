"""Random Hugging Face MarianMTModels and their copies in ctransformer, for the Marian parity tests
(tests/nn/test_marian.py, test_marian_pretrained.py, tests/decode/test_marian_generate.py)."""
import numpy as np
import pytest
import torch

import ctransformer as ct

transformers = pytest.importorskip("transformers")

D_MODEL, D_INNER, N_LAYERS, N_HEAD, N_POSITION = 16, 32, 2, 2, 64
# The asymmetric shape (asymmetric=True), a small opus-mt student's: a deeper, wider encoder with more heads,
# a one-layer decoder with fewer heads (heads of 4 and of 8 features) and its own FFN width.
ENCODER = dict(n_layers=3, n_head=4, d_inner=64)
DECODER = dict(n_layers=1, n_head=2, d_inner=48)


def marian_config(vocab, pad, trg_vocab=None, d_model=D_MODEL, n_layers=N_LAYERS, n_head=N_HEAD, d_inner=D_INNER,
                  n_position=N_POSITION, activation="swish", share=True, tie=True, dropout=0.0, decoder=None):
    """A MarianConfig as opus-mt's (eos 0, the pad id as the decoder's start, scaled embeddings): n_layers,
    n_head and d_inner for both sides, or for the encoder with `decoder` a dict of the decoder's."""
    decoder = {"n_layers": n_layers, "n_head": n_head, "d_inner": d_inner, **(decoder or {})}
    return transformers.MarianConfig(
        vocab_size=vocab, decoder_vocab_size=trg_vocab or vocab, d_model=d_model, encoder_layers=n_layers,
        decoder_layers=decoder["n_layers"], encoder_attention_heads=n_head, decoder_attention_heads=decoder["n_head"],
        encoder_ffn_dim=d_inner, decoder_ffn_dim=decoder["d_inner"], max_position_embeddings=n_position,
        pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=0, forced_eos_token_id=0,
        activation_function=activation, scale_embedding=True, share_encoder_decoder_embeddings=share,
        tie_word_embeddings=tie, dropout=dropout, attention_dropout=0.0, activation_dropout=0.0)


def marian_pair(share=True, tie=True, activation="swish", vocab=50, trg_vocab=None, seed=0, dropout=0.0,
                asymmetric=False):
    """(Hugging Face's model, ours, pad id): random weights in HF's, copied into ours; final_logits_bias
    random too (it is zero in a fresh model, and a zero would hide a missing or misplaced bias). asymmetric:
    the encoder ENCODER's sizes and the decoder DECODER's."""
    trg_vocab = vocab if share else (trg_vocab or vocab - 10)
    pad = trg_vocab - 1
    torch.manual_seed(seed)
    encoder = ENCODER if asymmetric else dict(n_layers=N_LAYERS, n_head=N_HEAD, d_inner=D_INNER)
    decoder = DECODER if asymmetric else encoder
    config = marian_config(vocab, pad, trg_vocab=trg_vocab, activation=activation, share=share, tie=tie,
                           dropout=dropout, decoder=decoder, **encoder)
    hf = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        hf.final_logits_bias.normal_()
    ours = ct.nn.Transformer(ct.nn.TransformerConfig.marian(
        vocab=vocab, trg_vocab=trg_vocab, d_model=D_MODEL, **encoder, n_position=N_POSITION, pad_idx=pad,
        share=share, tie=tie, activation=activation, dropout=dropout, decoder_n_layers=decoder["n_layers"],
        decoder_n_head=decoder["n_head"], decoder_d_inner=decoder["d_inner"]))
    ours.eval()
    ours.load_state_dict({k: v.detach().numpy() for k, v in hf.state_dict().items()})
    return hf, ours, pad


def batch(vocab, trg_vocab, pad):
    """A source with padding on one row, and decoder inputs that start on the pad id (Marian's start)."""
    rng = np.random.default_rng(1)
    src = rng.integers(1, min(vocab, trg_vocab) - 1, size=(3, 7))
    src[0, 5:] = pad
    src[1, 6] = 0          # eos, as Marian's tokenizer appends it
    labels = rng.integers(0, trg_vocab - 1, size=(3, 5))
    dec_in = np.concatenate([np.full((3, 1), pad), labels[:, :-1]], axis=1)   # shift_tokens_right
    return src, dec_in, labels


def hf_logits(hf, src, dec_in, pad):
    return hf(input_ids=torch.tensor(src), attention_mask=torch.tensor(src != pad),
              decoder_input_ids=torch.tensor(dec_in)).logits
