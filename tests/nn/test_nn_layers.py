"""The encoder-decoder's layers against PyTorch references written from the blog posts' code.

The post-norm Transformer (jadore801120: Modules.py, SubLayers.py, Layers.py, Models.py) in
tests/reference/post_norm.py, the toy translator's pre-norm model (MultiHead, FullyConnectedOutput, ...) in
tests/reference/pre_norm.py.
Every layer: same weights (loaded from torch), same inputs -> same outputs, attention weights and
gradients of inputs and parameters, in float32.

Tolerances: outputs and input gradients elementwise rtol 1e-5, atol 1e-6 (one layer, a few sums of
<= 64 terms); parameter gradients by reference.parity.assert_grads_close with rel 1e-5.
Layers with a ReLU are first moved off float32's knife edge for their inputs (off_the_knife_edge), so a
unit that another legal summation order would flip cannot decide a test.
"""
import numpy as np
import pytest
import torch

import ctransformer as ct
from helpers import assert_close, pair, rand
from reference import post_norm as post_ref
from reference import pre_norm as pre_ref
from reference.parity import (  # noqa: F401 (single_threaded_torch is an autouse fixture)
    assert_grads_close, assert_relu_margins, assert_state_dict_layout, clear_relu_knife_edges, single_threaded_torch,
    torch_to_ct,
)
from kernel_levels import every_level

# Every test at each level's SIMD loops and products.
at_every_level = every_level("loops")

PRE_NORM_OPTIONS = dict(layout="pre_norm", norm_first=True, qkv_bias=True, proj_bias=True, layer_norm_eps=1e-5,
                        attn_dropout=0.0, mask_fill=float("-inf"), scale_after_matmul=True)


def weighted_sum(out, weights):
    """sum(out * weights) in both libraries: a scalar whose gradient is `weights`."""
    if isinstance(out, torch.Tensor):
        return (out * torch.from_numpy(weights)).sum()
    return (out * ct.tensor(weights)).sum()


def pad_mask(b, lq, lk, valid, per_query=False):
    """(b, 1, lk) or (b, lq, lk) boolean masks, True where the key is one of the first valid[i] keys."""
    keep = np.arange(lk)[None, :] < np.asarray(valid)[:, None]
    mask = keep[:, None, :]
    return np.broadcast_to(mask, (b, lq, lk)).copy() if per_query else mask


# ---- masks and positional encoding ---------------------------------------------------------------
def test_masks_match_post_norm_functions():
    seq = np.array([[5, 3, 1, 1], [2, 1, 7, 1], [4, 4, 4, 4]])
    pad = ct.nn.get_pad_mask(seq, 1)
    sub = ct.nn.get_subsequent_mask(seq)
    assert pad.dtype == np.bool_ and pad.shape == (3, 1, 4)
    assert sub.dtype == np.bool_ and sub.shape == (1, 4, 4)
    np.testing.assert_array_equal(pad, post_ref.get_pad_mask(torch.tensor(seq), 1).numpy())
    np.testing.assert_array_equal(sub, post_ref.get_subsequent_mask(torch.tensor(seq)).numpy())
    np.testing.assert_array_equal(ct.nn.get_pad_mask(seq.astype(np.int32), 1), pad)
    with pytest.raises(ValueError, match="seq"):
        ct.nn.get_pad_mask(np.array([1, 2, 3]), 1)
    with pytest.raises(TypeError, match="seq"):
        ct.nn.get_subsequent_mask(np.zeros((2, 3), np.float32))


@pytest.mark.parametrize("d_hid,n_position", [(32, 200), (512, 200), (7, 13)])
def test_positional_table_matches_post_norm_numpy_code(d_hid, n_position):
    """jadore801120's _get_sinusoid_encoding_table (NumPy float64, then FloatTensor); tolerance 1e-7 absolute:
    NumPy's vectorised sin/cos may differ from libm's by an ulp in float64, which at most flips the last
    float32 bit."""
    pe = ct.nn.PositionalEncoding(d_hid, n_position)
    ref = post_ref.PositionalEncoding(d_hid, n_position)
    assert pe.pos_table.shape == (1, n_position, d_hid)
    assert_close(pe.pos_table, ref.pos_table, rtol=0, atol=1e-7)


def test_positional_table_matches_pre_norm_get_pe_exactly():
    """The toy translator's get_pe (math.sin / math.cos of pos / 1e4 ** (i / d_model)): bit-identical."""
    pe = ct.nn.PositionalEncoding(32, 50, pe_formula="per_index")
    ref = pre_ref.PositionEmbedding(39, 32, 50)
    np.testing.assert_array_equal(pe.pos_table.numpy(), ref.pe.numpy())


def test_positional_encoding_is_a_buffer_and_adds_the_table():
    pe = ct.nn.PositionalEncoding(16, 20)
    assert pe.parameters() == []
    assert [n for n, _ in pe.named_buffers()] == ["pos_table"]
    assert list(pe.state_dict()) == list(post_ref.PositionalEncoding(16, 20).state_dict()) == ["pos_table"]
    x = rand((2, 7, 16), seed=1)
    out = pe(ct.tensor(x))
    assert_close(out, post_ref.PositionalEncoding(16, 20)(torch.from_numpy(x)), rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="n_position"):
        pe(ct.tensor(rand((1, 21, 16))))
    with pytest.raises(ValueError, match="pe_formula"):
        ct.nn.PositionalEncoding(16, 20, pe_formula="cosine")


# ---- scaled dot-product attention ----------------------------------------------------------------
def test_scaled_dot_product_attention_matches_post_norm():
    b, h, lq, lk, dk, dv = 2, 3, 5, 6, 8, 4
    q, tq = pair(rand((b, h, lq, dk), seed=1))
    k, tk = pair(rand((b, h, lk, dk), seed=2))
    v, tv = pair(rand((b, h, lk, dv), seed=3))
    mask = pad_mask(b, lq, lk, [4, 6])[:, None]        # (b, 1, 1, lk)
    m = ct.nn.ScaledDotProductAttention(dk ** 0.5).eval()
    ref = post_ref.ScaledDotProductAttention(dk ** 0.5).eval()
    out, attn = m(q, k, v, mask)
    rout, rattn = ref(tq, tk, tv, torch.from_numpy(mask))
    assert_close(out, rout, what="output")
    assert_close(attn, rattn, what="attn")
    w = rand(out.shape, seed=4)
    weighted_sum(out, w).backward()
    weighted_sum(rout, w).backward()
    for a, e, name in ((q, tq, "q"), (k, tk, "k"), (v, tv, "v")):
        assert_close(a.grad, e.grad, rtol=1e-5, atol=1e-6, what=name)


# ---- multi-head attention --------------------------------------------------------------------------
def run_mha(m, ref, q_np, kv_np, ct_mask, torch_mask, self_attention):
    """Forward and backward of both modules; returns the ct and torch (output, attn, input grads)."""
    if self_attention:
        q, tq = pair(q_np)
        k = v = q
        tk = tv = tq
    else:
        q, tq = pair(q_np)
        k, tk = pair(kv_np)
        v, tv = k, tk
    out, attn = m(q, k, v, ct_mask)
    result = ref(tq, tk, tv, torch_mask)
    # the pre-norm reference returns the output only, and keeps its attention weights in last_attn
    rout, rattn = result if isinstance(result, tuple) else (result, ref.last_attn)
    w = rand(out.shape, seed=9)
    weighted_sum(out, w).backward()
    weighted_sum(rout, w).backward()
    grads = [(q.grad, tq.grad)] + ([] if self_attention else [(k.grad, tk.grad)])
    return (out, attn), (rout, rattn), grads


@pytest.mark.parametrize("per_query_mask", [False, True])
@pytest.mark.parametrize("self_attention", [True, False])
def test_multi_head_attention_matches_post_norm(self_attention, per_query_mask):
    """Post-norm MHA, projections without bias, mask (b, 1, lk) or (b, lq, lk) broadcast over heads."""
    n_head, d_model, d_k, d_v, b, lq = 4, 32, 8, 6, 3, 5
    lk = lq if self_attention else 7
    ref = post_ref.MultiHeadAttention(n_head, d_model, d_k, d_v).eval()
    m = ct.nn.MultiHeadAttention(n_head, d_model, d_k, d_v).eval()
    assert_state_dict_layout(m, ref)
    torch_to_ct(ref, m)
    mask = pad_mask(b, lq, lk, [lk, 3, lk - 1], per_query=per_query_mask)
    if per_query_mask and self_attention:
        mask = mask & np.tril(np.ones((lq, lk), bool))[None]
    (out, attn), (rout, rattn), grads = run_mha(m, ref, rand((b, lq, d_model), seed=1),
                                                rand((b, lk, d_model), seed=2), mask, torch.from_numpy(mask),
                                                self_attention)
    assert attn.shape == (b, n_head, lq, lk)
    assert_close(out, rout, what="output")
    assert_close(attn, rattn, what="attn")
    for a, e in grads:
        assert_close(a, e, what="input grad")
    assert_grads_close(m, ref, rel=1e-5)


@pytest.mark.parametrize("self_attention", [True, False])
def test_multi_head_attention_matches_pre_norm_multihead(self_attention):
    """Pre-norm: ONE LayerNorm on Q, K and V, biases, -inf masking, residual with the raw query."""
    b, L = 3, 9
    ref = pre_ref.MultiHead(32, 4).eval()
    m = ct.nn.MultiHeadAttention(4, 32, 8, 8, 0.1, **PRE_NORM_OPTIONS).eval()
    assert_state_dict_layout(m, ref)
    assert [n for n, _ in m.named_parameters()][:2] == ["fc_Q.weight", "fc_Q.bias"]
    torch_to_ct(ref, m)
    ids = np.full((b, L), 5)
    ids[0, 6:] = pre_ref.PAD
    ids[2, 4:] = pre_ref.PAD
    torch_mask = pre_ref.mask_tril(torch.tensor(ids)) if self_attention else pre_ref.mask_pad(torch.tensor(ids))
    ct_mask = ~torch_mask.numpy()[:, 0]                         # (b, L, L), True = may attend
    (out, attn), (rout, _), grads = run_mha(m, ref, rand((b, L, 32), seed=1), rand((b, L, 32), seed=2),
                                            ct_mask, torch_mask, self_attention)
    assert_close(out, rout, what="output")
    assert_close(attn, ref.last_attn, what="attn")
    assert np.all(attn.numpy()[np.broadcast_to(~ct_mask[:, None], attn.shape)] == 0)   # -inf -> exactly 0
    for a, e in grads:
        assert_close(a, e, what="input grad")
    assert_grads_close(m, ref, rel=1e-5)


# ---- feed-forward and layers ---------------------------------------------------------------------
def off_the_knife_edge(ref, build, forward, *models):
    """Shift ref's ReLU units off float32's knife edge for forward(ref) (reference.parity), then load
    ref's weights into the ctransformer module(s): ref may be a ModuleList of several references,
    matched in order by `models`. forward takes a module and the dtype of the inputs to give it."""
    run = lambda m: forward(m, next(m.parameters()).dtype)  # noqa: E731
    clear_relu_knife_edges(ref, build, run)
    for m, r in zip(models, ref if isinstance(ref, torch.nn.ModuleList) else [ref]):
        torch_to_ct(r, m)
    assert_relu_margins(ref, build, run)


def check_feed_forward(m, ref, build):
    """Same weights in (torch's, loaded into m): same outputs, input gradient and weight gradients out."""
    assert_state_dict_layout(m, ref)
    x, tx = pair(rand((3, 5, 32), seed=1))
    off_the_knife_edge(ref, build, lambda r, dtype: r(tx.to(dtype)), m)
    out, rout = m(x), ref(tx)
    assert_close(out, rout)
    w = rand(out.shape, seed=2)
    weighted_sum(out, w).backward()
    weighted_sum(rout, w).backward()
    assert_close(x.grad, tx.grad)
    assert_grads_close(m, ref, rel=1e-5)


def test_positionwise_feed_forward_matches_post_norm():
    ref = post_ref.PositionwiseFeedForward(32, 64).eval()
    m = ct.nn.PositionwiseFeedForward(32, 64).eval()
    check_feed_forward(m, ref, lambda: post_ref.PositionwiseFeedForward(32, 64))


def test_positionwise_feed_forward_matches_pre_norm_fully_connected_output():
    ref = pre_ref.FullyConnectedOutput(32, 64).eval()
    m = ct.nn.PositionwiseFeedForward(32, 64, 0.1, **PRE_NORM_OPTIONS).eval()
    assert list(m.state_dict()) == ["fc.0.weight", "fc.0.bias", "fc.2.weight", "fc.2.bias", "norm.weight", "norm.bias"]
    check_feed_forward(m, ref, lambda: pre_ref.FullyConnectedOutput(32, 64))


@pytest.mark.parametrize("family", ["post_norm", "pre_norm"])
def test_encoder_and_decoder_layers_match(family):
    b, ls, lt = 2, 7, 7     # the pre-norm reference's masks need equal lengths
    if family == "post_norm":
        ref_enc, ref_dec = post_ref.EncoderLayer(32, 64, 4, 8, 8).eval(), post_ref.DecoderLayer(32, 64, 4, 8, 8).eval()
        enc, dec = ct.nn.EncoderLayer(32, 64, 4, 8, 8).eval(), ct.nn.DecoderLayer(32, 64, 4, 8, 8).eval()
        src_mask = pad_mask(b, ls, ls, [7, 5])
        trg_mask = pad_mask(b, lt, lt, [6, 7]) & np.tril(np.ones((lt, lt), bool))[None]
        t_src, t_trg = torch.from_numpy(src_mask), torch.from_numpy(trg_mask)
    else:
        ref_enc, ref_dec = pre_ref.EncoderLayer(32, 4, 64).eval(), pre_ref.DecoderLayer(32, 4, 64).eval()
        enc = ct.nn.EncoderLayer(32, 64, 4, 8, 8, 0.1, **PRE_NORM_OPTIONS).eval()
        dec = ct.nn.DecoderLayer(32, 64, 4, 8, 8, 0.1, **PRE_NORM_OPTIONS).eval()
        x_ids, y_ids = np.full((b, ls), 9), np.full((b, lt), 9)
        x_ids[1, 5:] = pre_ref.PAD
        y_ids[0, 6:] = pre_ref.PAD
        t_src, t_trg = pre_ref.mask_pad(torch.tensor(x_ids)), pre_ref.mask_tril(torch.tensor(y_ids))
        src_mask, trg_mask = ~t_src.numpy()[:, 0], ~t_trg.numpy()[:, 0]
    for m, ref in ((enc, ref_enc), (dec, ref_dec)):
        assert_state_dict_layout(m, ref)
    x, tx = pair(rand((b, ls, 32), seed=1))
    y, ty = pair(rand((b, lt, 32), seed=2))
    if family == "post_norm":
        kinds = (post_ref.EncoderLayer, post_ref.DecoderLayer)
    else:
        kinds = (pre_ref.EncoderLayer, pre_ref.DecoderLayer)
    sizes = ((32, 64, 4, 8, 8),) * 2 if family == "post_norm" else ((32, 4, 64),) * 2

    def both(pair_, dtype):
        e, d = pair_
        if family == "post_norm":
            return d(ty.to(dtype), e(tx.to(dtype), t_src)[0], t_trg, t_src)
        return d(e(tx.to(dtype), t_src), ty.to(dtype), t_src, t_trg)

    off_the_knife_edge(torch.nn.ModuleList([ref_enc, ref_dec]),
                       lambda: torch.nn.ModuleList([k(*a) for k, a in zip(kinds, sizes)]), both, enc, dec)
    enc_out, enc_attn = enc(x, src_mask)
    dec_out, dec_slf, dec_enc = dec(y, enc_out, trg_mask, src_mask)
    if family == "post_norm":
        renc_out, renc_attn = ref_enc(tx, t_src)
        rdec_out, rdec_slf, rdec_enc = ref_dec(ty, renc_out, t_trg, t_src)
    else:
        renc_out = ref_enc(tx, t_src)
        rdec_out = ref_dec(renc_out, ty, t_src, t_trg)
        renc_attn, rdec_slf, rdec_enc = ref_enc.mh.last_attn, ref_dec.mhl.last_attn, ref_dec.mh2.last_attn
    for a, e, what in ((enc_out, renc_out, "enc out"), (enc_attn, renc_attn, "enc attn"), (dec_out, rdec_out, "dec"),
                       (dec_slf, rdec_slf, "dec slf attn"), (dec_enc, rdec_enc, "dec enc attn")):
        assert_close(a, e, what=what)
    w = rand(dec_out.shape, seed=3)
    weighted_sum(dec_out, w).backward()
    weighted_sum(rdec_out, w).backward()
    assert_close(x.grad, tx.grad, what="x grad")
    assert_close(y.grad, ty.grad, what="y grad")
    for m, ref in ((enc, ref_enc), (dec, ref_dec)):
        assert_grads_close(m, ref, rel=1e-5)


# ---- dropout ---------------------------------------------------------------------------------------
def test_attention_dropout_is_the_post_norm_fixed_0_1():
    """jadore801120's MultiHeadAttention builds ScaledDotProductAttention(temperature=d_k ** 0.5), whose
    attn_dropout defaults to 0.1 whatever `dropout` is: with dropout=0 the attention weights still lose
    10% of their entries in train mode, the rest scaled by 1/0.9. 3 * 4 * 40 * 40 = 19200 draws: the
    rate's standard error is 0.002, the check allows 0.012."""
    m = ct.nn.MultiHeadAttention(4, 32, 8, 8, dropout=0.0)
    assert m.dropout.p == 0.0 and m.attention.dropout.p == pytest.approx(0.1)
    x = ct.tensor(rand((3, 40, 32), seed=1))
    ct.manual_seed(3)
    _, attn_train = m.train()(x, x, x)
    _, attn_eval = m.eval()(x, x, x)
    a, e = attn_train.numpy(), attn_eval.numpy()
    dropped = a == 0
    assert abs(dropped.mean() - 0.1) < 0.012
    assert_close(a[~dropped], e[~dropped] / 0.9, rtol=1e-5, atol=1e-7)


def test_feed_forward_dropout_rate_and_scaling():
    """Pre-norm FFN (the toy translator's): out = x + dropout(f(LN x)), so out == x exactly where dropout zeroed.
    p = 0.3 over 4 * 50 * 32 = 6400 draws: standard error 0.006, the check allows 0.03."""
    m = ct.nn.PositionwiseFeedForward(32, 64, 0.3, **PRE_NORM_OPTIONS)
    x_np = rand((4, 50, 32), seed=2)
    x = ct.tensor(x_np)
    ct.manual_seed(4)
    delta_train = m.train()(x).numpy() - x_np
    delta_eval = m.eval()(x).numpy() - x_np
    dropped = delta_train == 0
    assert abs(dropped.mean() - 0.3) < 0.03
    assert_close(delta_train[~dropped], delta_eval[~dropped] / 0.7, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(m(x).numpy(), m(x).numpy())     # eval is deterministic


def test_train_eval_reach_every_dropout():
    m = ct.nn.DecoderLayer(32, 64, 4, 8, 8, dropout=0.2)
    m.eval()
    assert not m.training and not m.slf_attn.attention.dropout.training and not m.pos_ffn.dropout.training
    m.train()
    assert m.enc_attn.dropout.training and m.pos_ffn.dropout.training


# ---- bad inputs ------------------------------------------------------------------------------------
def test_layer_bad_inputs():
    m = ct.nn.MultiHeadAttention(4, 32, 8, 8)
    x = ct.tensor(rand((2, 5, 32)))
    with pytest.raises(ValueError, match="q must be"):
        m(ct.tensor(rand((2, 5, 16))), x, x)
    with pytest.raises(ValueError, match="batch"):
        m(x, ct.tensor(rand((3, 5, 32))), ct.tensor(rand((3, 5, 32))))
    with pytest.raises(ValueError, match="same length"):
        m(x, x, ct.tensor(rand((2, 6, 32))))
    with pytest.raises(ValueError, match="mask"):
        m(x, x, x, np.ones((2, 5), bool))
    with pytest.raises(ValueError, match="mask"):
        m(x, x, x, np.ones((2, 1, 4), bool))
    with pytest.raises(TypeError, match="mask"):
        m(x, x, x, np.ones((2, 1, 5), np.float32))
    with pytest.raises(ValueError, match="layout"):   # 'seed001' is no alias (only 'seed000' and 'seed003' are)
        ct.nn.MultiHeadAttention(4, 32, 8, 8, layout="seed001")
    with pytest.raises(ValueError, match="d_in"):
        ct.nn.PositionwiseFeedForward(32, 64)(ct.tensor(rand((2, 3, 31))))
    with pytest.raises(ValueError, match="enc_output"):
        enc = ct.nn.Encoder(20, 16, 1, 2, 8, 8, 16, 32, 0)
        ct.nn.Decoder(20, 16, 1, 2, 8, 8, 16, 32, 0)(np.ones((2, 3), int), None, x, None)
    with pytest.raises(ValueError, match="src_seq"):
        enc(np.ones((2, 3, 1), int))


# ---- the stacks with jadore801120's own signatures ---------------------------------------------------
def test_encoder_and_decoder_match_post_norm():
    """Encoder(n_src_vocab, d_word_vec, n_layers, n_head, d_k, d_v, d_model, d_inner, pad_idx, ...) and the
    Decoder, standalone, with scale_emb on: names, outputs, every layer's attention, gradients."""
    args = (23, 32, 2, 4, 8, 8, 32, 64, 0)
    ref_enc = post_ref.Encoder(*args, scale_emb=True).eval()
    ref_dec = post_ref.Decoder(*args, scale_emb=True).eval()
    enc = ct.nn.Encoder(*args, scale_emb=True).eval()
    dec = ct.nn.Decoder(*args, scale_emb=True).eval()
    for m, ref in ((enc, ref_enc), (dec, ref_dec)):
        assert_state_dict_layout(m, ref)
    src = np.array([[3, 4, 5, 6, 0], [7, 8, 0, 0, 0]])
    trg = np.array([[9, 10, 11, 0], [12, 13, 14, 15]])

    def both(pair_, dtype):
        e, d = pair_
        t_src, t_trg = torch.from_numpy(src), torch.from_numpy(trg)
        src_m = post_ref.get_pad_mask(t_src, 0)
        trg_m = post_ref.get_pad_mask(t_trg, 0) & post_ref.get_subsequent_mask(t_trg)
        return d(t_trg, trg_m, e(t_src, src_m)[0], src_m)

    off_the_knife_edge(torch.nn.ModuleList([ref_enc, ref_dec]),
                       lambda: torch.nn.ModuleList([post_ref.Encoder(*args, scale_emb=True),
                                                    post_ref.Decoder(*args, scale_emb=True)]),
                       both, enc, dec)
    src_mask = ct.nn.get_pad_mask(src, 0)
    trg_mask = ct.nn.get_pad_mask(trg, 0) & ct.nn.get_subsequent_mask(trg)
    enc_out, enc_attns = enc(src, src_mask, return_attns=True)
    dec_out, slf, cross = dec(trg, trg_mask, enc_out, src_mask, return_attns=True)
    t_src, t_trg = torch.from_numpy(src), torch.from_numpy(trg)
    t_src_mask = post_ref.get_pad_mask(t_src, 0)
    t_trg_mask = post_ref.get_pad_mask(t_trg, 0) & post_ref.get_subsequent_mask(t_trg)
    renc_out, renc_attns = ref_enc(t_src, t_src_mask, return_attns=True)
    rdec_out, rslf, rcross = ref_dec(t_trg, t_trg_mask, renc_out, t_src_mask, return_attns=True)
    assert_close(enc_out, renc_out, what="encoder")
    assert_close(dec_out, rdec_out, what="decoder")
    for a, e in zip(enc_attns + slf + cross, renc_attns + rslf + rcross):
        assert_close(a, e, what="attention")
    w = rand(dec_out.shape, seed=5)
    weighted_sum(dec_out, w).backward()
    weighted_sum(rdec_out, w).backward()
    for m, ref in ((enc, ref_enc), (dec, ref_dec)):
        assert_grads_close(m, ref, rel=1e-5)
    assert np.all(enc.src_word_emb.weight.grad.numpy()[0] == 0)   # padding_idx: no gradient to the PAD row


def test_config_options_combine_freely():
    """The options are independent: the post-norm model's names with the toy translator's pre-norm sub-layers
    and PE."""
    config = ct.nn.TransformerConfig(n_src_vocab=20, n_trg_vocab=20, d_word_vec=16, d_model=16, d_inner=32,
                                     n_layers=1, n_head=2, d_k=8, d_v=8, norm_first=True, qkv_bias=True,
                                     pe_formula="per_index")
    model = ct.nn.Transformer(config).eval()
    names = list(model.state_dict())
    assert "encoder.layer_stack.0.slf_attn.w_qs.bias" in names and "encoder.layer_stack.0.slf_attn.fc.bias" not in names
    np.testing.assert_array_equal(model.encoder.position_enc.pos_table.numpy(),
                                  ct.nn.PositionalEncoding(16, 200, pe_formula="per_index").pos_table.numpy())
    assert model(np.ones((2, 3), int) * 4, np.ones((2, 5), int) * 4).shape == (10, 20)
    with pytest.raises(ValueError, match="layout"):   # 'seed002' is no alias (only 'seed000' and 'seed003' are)
        ct.nn.TransformerConfig(layout="seed002")
