"""The toy translator (the pre-norm model of the blog post "手动实现Transformer") as
Transformer.small_pre_norm(), against tests/reference/pre_norm.py (the post's code; sizes made arguments
so the same code builds the base size).

Batches come from the toy translator's own get_data (x 50 ids, y 51 ids; the model reads y[:, :-1] and
predicts y[:, 1:]); the loss is the toy translator's: cross-entropy over the non-PAD targets.

Tolerances (float32):
- the toy size (d_model 32, 4 heads, FFN 64, 3 + 3 layers), batch 8 as the toy translator's loader: logits and
  attention rtol 1e-5, atol 1e-6 (seen ~7e-7 absolute on logits of magnitude ~2); loss rel 1e-6;
  gradients rel 1e-4 of each tensor's largest entry against torch float32 (seen <= 1e-6).
- base size (512, 8 heads, FFN 2048, 6 + 6), batch 2: logits and attention rtol 1e-4, atol 1e-5;
  loss rel 1e-5; gradients rel 1e-2 against torch float32. That bound is torch's, not ours: in the
  pre-norm encoder torch float32 is up to 3.7e-3 away from torch float64 (encoder.layer_5.fc.fc.0.weight),
  while ctransformer stays within ~5e-7 of float64 on every tensor.
- so every parity test also runs torch in float64 and holds ctransformer's gradients to rel 1e-5 of it.
  That bound holds under any legal float32 summation order only because no ReLU input sits within
  float32 rounding of zero: check_parity first shifts the few units that do (reference.parity,
  RELU_MARGIN; without it the base test failed under OpenBLAS's Cooperlake kernels on Zen 4 and passed
  under its SkylakeX ones).
The key projections' biases have a gradient that is zero in exact arithmetic (softmax ignores a shift
shared by a row), so both libraries return rounding noise there; assert_grads_close's floor
(1e-6 of the model's largest gradient) covers it.
"""
import numpy as np
import pytest
import torch

import ctransformer as ct
from helpers import assert_close
from reference import pre_norm as pre_ref
from reference.parity import (  # noqa: F401 (single_threaded_torch is an autouse fixture)
    assert_grads_close, assert_relu_margins, assert_state_dict_layout, clear_relu_knife_edges, ct_to_torch,
    float64_copy, single_threaded_torch, torch_to_ct,
)
from kernel_levels import every_level

# Every test at each level's SIMD loops and products: the whole model, forward and backward.
at_every_level = every_level("loops")

SIZES = {
    "toy": dict(kwargs=dict(), ref=dict(), batch=8, rtol=1e-5, atol=1e-6, loss=1e-6, grad=1e-4),
    "base": dict(kwargs=dict(d_model=512, n_head=8, d_inner=2048, n_layers=6),
                 ref=dict(d_model=512, n_head=8, d_ff=2048, n_layers=6), batch=2,
                 rtol=1e-4, atol=1e-5, loss=1e-5, grad=1e-2),
}


def build(size, torch_seed=0):
    torch.manual_seed(torch_seed)
    ref = pre_ref.Transformer(**SIZES[size]["ref"]).eval()
    model = ct.nn.Transformer.small_pre_norm(**SIZES[size]["kwargs"]).eval()
    return model, ref


def toy_loss(logits, gold):
    """The toy translator's loss: pred[select], y[select] with select = y != <PAD>, then CrossEntropyLoss()."""
    pred = logits.reshape(-1, 39)
    target = torch.from_numpy(gold)
    select = target != pre_ref.VOCAB_Y["<PAD>"]
    return torch.nn.CrossEntropyLoss()(pred[select], target[select])


def float64_grads(ref, size, x, y):
    twin = float64_copy(ref, lambda: pre_ref.Transformer(**SIZES[size]["ref"]))
    toy_loss(twin(torch.from_numpy(x), torch.from_numpy(y[:, :-1])), y[:, 1:].reshape(-1)).backward()
    return twin


def run_both(model, ref, x, y):
    """The toy translator's training step up to loss.backward(), in both libraries."""
    inp, gold = y[:, :-1], y[:, 1:].reshape(-1)
    out, enc_slf, dec_slf, dec_enc = model(x, inp, return_attns=True)
    loss = ct.functional.cross_entropy(out.reshape(-1, 39), gold, ignore_index=2)
    rout = ref(torch.from_numpy(x), torch.from_numpy(inp))
    renc, rdec_slf, rdec_enc = ref.attentions()
    rloss = toy_loss(rout, gold)
    return (out, enc_slf, dec_slf, dec_enc, loss), (rout, renc, rdec_slf, rdec_enc, rloss)


def assert_same(ours, theirs, tol):
    for i, (a, e) in enumerate(zip(ours[:4], theirs[:4])):
        if i == 0:
            assert a.shape == tuple(e.shape)      # (b, 50, 39): the toy translator does not flatten
            assert_close(a, e, rtol=tol["rtol"], atol=tol["atol"], what="logits")
            continue
        assert len(a) == len(e)
        for j, (aa, ee) in enumerate(zip(a, e)):
            assert_close(aa, ee, rtol=tol["rtol"], atol=tol["atol"], what=f"attention list {i} layer {j}")
    assert ours[4].item() == pytest.approx(theirs[4].item(), rel=tol["loss"])


def test_preset_defaults_are_the_toy_translators():
    c = ct.nn.TransformerConfig.small_pre_norm()
    assert (c.n_src_vocab, c.n_trg_vocab, c.src_pad_idx, c.trg_pad_idx) == (39, 39, 2, 2)
    assert (c.d_model, c.n_head, c.d_k, c.d_v, c.d_inner, c.n_layers, c.n_position) == (32, 4, 8, 8, 64, 3, 50)
    assert c.dropout == pytest.approx(0.1) and c.attn_dropout == 0.0
    assert c.norm_first and c.qkv_bias and c.proj_bias and c.output_bias and c.scale_after_matmul
    assert c.layout == "pre_norm" and c.pe_formula == "per_index" and c.mask_fill == float("-inf")
    assert c.layer_norm_eps == pytest.approx(1e-5) and c.embedding_init_std == pytest.approx(0.1)
    assert not (c.trg_emb_prj_weight_sharing or c.emb_src_trg_weight_sharing or c.xavier_init
                or c.embedding_padding_idx or c.embed_dropout or c.embed_layer_norm or c.flatten_logits)
    assert c.scale_emb_or_prj == "none"
    # the same model through the config and through keyword fields
    kw = ct.nn.TransformerConfig(**{k: getattr(c, k) for k in ("n_src_vocab", "n_trg_vocab", "layout")})
    assert kw.layout == "pre_norm" and kw.d_model == 512
    with pytest.raises(TypeError, match="d_modle"):
        ct.nn.TransformerConfig(d_modle=3)


def test_older_names_are_aliases():
    """seed003() and layout='seed000'/'seed003' (older names, from before issue 20, kept as aliases) build the
    same models as small_pre_norm() and layout='post_norm'/'pre_norm'; 'seed001' was never one."""
    assert repr(ct.nn.TransformerConfig.seed003()) == repr(ct.nn.TransformerConfig.small_pre_norm())
    assert ct.nn.TransformerConfig(layout="seed003").layout == "pre_norm"
    assert ct.nn.TransformerConfig(layout="seed000").layout == "post_norm"
    ct.manual_seed(5)
    a = ct.nn.Transformer.seed003().state_dict()
    ct.manual_seed(5)
    b = ct.nn.Transformer.small_pre_norm().state_dict()
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    layer = ct.nn.EncoderLayer(32, 64, 4, 8, 8, layout="seed003", norm_first=True)
    assert "mh.fc_Q.weight" in layer.state_dict()
    with pytest.raises(ValueError, match="'post_norm', 'pre_norm' or 'marian'"):
        ct.nn.TransformerConfig(layout="seed001")


@pytest.mark.parametrize("size", ["toy", "base"])
def test_names_order_and_count_match_the_reference_model(size):
    model, ref = build(size)
    assert_state_dict_layout(model, ref)
    names = list(model.state_dict())
    assert names[:2] == ["embed_x.pe", "embed_x.embed.weight"]
    assert "encoder.layer_l.mh.fc_Q.weight" in names and "decoder.layer_1.mhl.norm.bias" in names
    assert "encoder.layer_l.fc.fc.2.bias" in names and names[-2:] == ["fc_out.weight", "fc_out.bias"]
    assert model.num_parameters() == sum(p.numel() for p in ref.parameters())
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in ref.named_parameters()]


def test_positional_table_is_the_toy_translators():
    model, ref = build("toy")
    np.testing.assert_array_equal(model.state_dict()["embed_x.pe"], ref.embed_x.pe.numpy())
    np.testing.assert_array_equal(model.embed_y.pe.numpy(), ref.embed_y.pe.numpy())


def check_parity(size, model, ref, batch_seed):
    """Same weights on both sides: outputs and attention maps, then every gradient (also against float64).
    First every ReLU unit is moved off float32's knife edge for this batch (reference.parity), in ref and
    then in model, so no legal summation order can flip one and decide the test."""
    x, y = pre_ref.get_batch(SIZES[size]["batch"], seed=batch_seed)
    build_ref = lambda: pre_ref.Transformer(**SIZES[size]["ref"])  # noqa: E731
    forward = lambda m: m(torch.from_numpy(x), torch.from_numpy(y[:, :-1]))  # noqa: E731
    clear_relu_knife_edges(ref, build_ref, forward)
    torch_to_ct(ref, model)
    assert_relu_margins(ref, build_ref, forward)
    ours, theirs = run_both(model, ref, x, y)
    assert_same(ours, theirs, SIZES[size])
    ours[4].backward()
    theirs[4].backward()
    assert_grads_close(model, ref, rel=SIZES[size]["grad"])
    assert_grads_close(model, float64_grads(ref, size, x, y), rel=1e-5)


@pytest.mark.parametrize("size", ["toy", "base"])
def test_torch_to_ctransformer_parity(size):
    model, ref = build(size)
    torch_to_ct(ref, model)
    check_parity(size, model, ref, batch_seed=0)


@pytest.mark.parametrize("size", ["toy", "base"])
def test_ctransformer_to_torch_parity(size):
    ct.manual_seed(3)
    model, ref = build(size)
    ct_to_torch(model, ref)
    check_parity(size, model, ref, batch_seed=1)


def test_state_dict_round_trip():
    x, y = pre_ref.get_batch(4, seed=2)
    ct.manual_seed(8)
    model, ref = build("toy")
    ct_to_torch(model, ref)
    again = ct.nn.Transformer.small_pre_norm().eval()
    torch_to_ct(ref, again)
    np.testing.assert_array_equal(again(x, y[:, :-1]).numpy(), model(x, y[:, :-1]).numpy())
    for name, value in ref.state_dict().items():
        np.testing.assert_array_equal(again.state_dict()[name], value.numpy(), err_msg=name)


def test_masking_with_minus_infinity():
    """PAD columns and the upper triangle get exactly zero weight; no row is fully masked (x and y start
    with <SOS>), so no NaN appears."""
    model, _ = build("toy")
    x, y = pre_ref.get_batch(4, seed=3)
    inp = y[:, :-1]
    _, enc_slf, dec_slf, dec_enc = model(x, inp, return_attns=True)
    x_pad = (x == 2)[:, None, None, :]
    y_forbidden = (inp == 2)[:, None, None, :] | np.triu(np.ones((50, 50), bool), 1)[None, None]
    for a in enc_slf + dec_enc:
        a = a.numpy()
        assert np.all(a[np.broadcast_to(x_pad, a.shape)] == 0) and not np.isnan(a).any()
    for a in dec_slf:
        a = a.numpy()
        assert np.all(a[np.broadcast_to(y_forbidden, a.shape)] == 0)
        assert_close(a.sum(-1), np.ones(a.shape[:-1], np.float32), rtol=0, atol=1e-5)


def test_dropout_is_in_the_sublayers_only():
    """Train mode: outputs change between calls (DropOut after out_fc, Dropout in fc), but the attention
    weights are never dropped (the toy translator has no attention dropout): every row still sums to 1."""
    model, _ = build("toy")
    model.train()
    x, y = pre_ref.get_batch(4, seed=4)
    first, attns, _, _ = model(x, y[:, :-1], return_attns=True)
    second = model(x, y[:, :-1])
    assert not np.array_equal(first.numpy(), second.numpy())
    for a in attns:
        assert_close(a.numpy().sum(-1), np.ones(a.shape[:-1], np.float32), rtol=0, atol=1e-5)
    model.eval()
    np.testing.assert_array_equal(model(x, y[:, :-1]).numpy(), model(x, y[:, :-1]).numpy())


def test_initialisation_follows_the_toy_translator():
    """Embeddings N(0, 0.1) over the whole table (1248 draws: std within 10%); every Linear keeps
    torch's default U(-1/sqrt(in), 1/sqrt(in)) for weight and bias; LayerNorm ones and zeros."""
    ct.manual_seed(1)
    model = ct.nn.Transformer.small_pre_norm()
    assert model.embed_x.embed.padding_idx is None and model.embed_y.embed.padding_idx is None
    for name, p in model.named_parameters():
        w = p.numpy()
        if name.endswith("embed.weight"):
            assert abs(w.std() / 0.1 - 1) < 0.1 and abs(w.mean()) < 0.01, name
            assert np.abs(w[2]).max() > 0           # no padding_idx: the PAD row is drawn too
        elif ".norm." in name:
            np.testing.assert_array_equal(w, 1.0 if name.endswith("weight") else 0.0)
        else:
            fan_in = 64 if ".fc.2." in name else 32
            assert np.abs(w).max() <= 1 / np.sqrt(fan_in), name


def test_bad_inputs():
    model = ct.nn.Transformer.small_pre_norm().eval()
    x, y = pre_ref.get_batch(2)
    with pytest.raises(ValueError, match="trg_seq has length 51.*n_position = 50"):
        model(x, y)                                 # y must lose its last token first, as in the toy translator
    with pytest.raises(IndexError, match="src_seq.*39"):
        model(np.full((2, 50), 39), y[:, :-1])
    with pytest.raises(TypeError, match="src_seq"):
        model(x.astype(np.float64), y[:, :-1])
    with pytest.raises(ValueError, match="batch size"):
        model(x[:1], y[:, :-1])
    with pytest.raises(ValueError, match="multiple of n_head"):
        ct.nn.Transformer.small_pre_norm(d_model=30)


def test_config_is_a_copy():
    model = ct.nn.Transformer.small_pre_norm()
    config = model.config
    config.d_model = 5
    assert model.config.d_model == 32
    assert ct.nn.Transformer(model.config).config.layout == "pre_norm"
