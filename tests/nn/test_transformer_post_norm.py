"""The post-norm Transformer (jadore801120's model) against tests/reference/post_norm.py.

Same state dict in both (torch -> ctransformer and ctransformer -> torch), same padded batch, dropout off:
logits, every layer's attention weights (encoder self, decoder self, decoder-encoder), the cross-entropy
ignoring the target pad, and the gradient of every parameter after backward.

Tolerances (float32; both libraries sum in different orders, OpenBLAS vs torch's own kernels):
- small (d_model 32, 4 heads, 2 + 2 layers, d_inner 64): logits and attention rtol 1e-5, atol 1e-6;
  loss rel 1e-6; gradients rel 1e-4 of each tensor's largest entry (assert_grads_close). Seen: logits
  ~2e-7 absolute, gradients <= ~3e-6 relative.
- base (the paper's 512, 8 heads, 6 + 6 layers, d_inner 2048): logits and attention rtol 1e-4,
  atol 1e-5; loss rel 1e-5; gradients rel 2e-3 against torch float32. The error of a dot product grows
  with its length (512-2048 terms here) and the backward pass chains twelve layers of them plus
  LayerNorm, whose gradient divides by the standard deviation; the worst tensor seen (the last decoder
  layer's w_ks, whose gradient is small and full of cancellation) sits at 3e-4, and torch float32 itself
  is 2.5e-4 away from float64 there.
- every parity test also runs torch in float64 and holds ctransformer's gradients to rel 1e-5 of it
  (plus the floor of assert_grads_close), so the loose float32-vs-float32 bound cannot hide an error of ours.
- before any of it, off_the_knife_edge shifts the biases of the few ReLU units whose input lies within
  float32 rounding of zero for this batch (reference.parity, RELU_MARGIN), in both libraries: a unit
  flipped by a different but legal summation order (another BLAS core) would otherwise decide the test.
"""
import numpy as np
import pytest
import torch

import ctransformer as ct
from helpers import assert_close
from reference import post_norm as post_ref
from reference.parity import (  # noqa: F401 (single_threaded_torch is an autouse fixture)
    assert_grads_close, assert_relu_margins, assert_state_dict_layout, clear_relu_knife_edges, ct_to_torch,
    float64_copy, single_threaded_torch, torch_to_ct,
)

SMALL = dict(d_word_vec=32, d_model=32, d_inner=64, n_layers=2, n_head=4, d_k=8, d_v=8)
BASE = dict()   # jadore801120's defaults: 512, 2048, 6 layers, 8 heads, d_k = d_v = 64
PAD = 1
TOL = {
    "small": dict(rtol=1e-5, atol=1e-6, loss=1e-6, grad=1e-4),
    "base": dict(rtol=1e-4, atol=1e-5, loss=1e-5, grad=2e-3),
}

# (name, size, n_src_vocab, n_trg_vocab, keyword options of Transformer)
VARIANTS = [
    ("small-prj-tied", "small", 41, 41, dict()),
    ("small-emb-tied", "small", 41, 41, dict(scale_emb_or_prj="emb")),
    ("small-none-tied", "small", 41, 41, dict(scale_emb_or_prj="none")),
    ("small-untied", "small", 37, 41, dict(trg_emb_prj_weight_sharing=False, emb_src_trg_weight_sharing=False)),
    ("small-prj-tied-only", "small", 37, 41, dict(emb_src_trg_weight_sharing=False)),
    ("base-prj-tied", "base", 41, 41, dict()),
    # A distilled student's shape: 3 encoder layers of 4 heads of 8 and FFN 64 (the shorthand), 1 decoder layer of
    # 2 heads of 16 (its queries and values 32 wide, as the encoder's) and FFN 48.
    ("small-asymmetric", "small", 41, 41, dict(encoder_n_layers=3, decoder_n_layers=1, decoder_n_head=2,
                                               decoder_d_k=16, decoder_d_v=16, decoder_d_inner=48)),
]


def reference_transformer(n_src_vocab, n_trg_vocab, config, options):
    """jadore801120's Transformer; with one side's own sizes (encoder_n_layers, decoder_n_head, ...), that side's
    Encoder or Decoder of the reference rebuilt at them, and the embeddings tied again as the reference ties them.
    The reference initialises every matrix with xavier_uniform_; the tests copy weights across, so the rebuilt
    side's default init does not matter."""
    sides = {k: v for k, v in options.items() if k.startswith(("encoder_", "decoder_"))}
    plain = {k: v for k, v in options.items() if k not in sides}
    sizes = {**config, **plain}
    shorthand = {k: sizes.get(k) for k in ("n_layers", "n_head", "d_k", "d_v", "d_inner")}
    shorthand = {k: v for k, v in shorthand.items() if v is not None}
    encoder = {**shorthand, **{k[len("encoder_"):]: v for k, v in sides.items() if k.startswith("encoder_")}}
    decoder = {**shorthand, **{k[len("decoder_"):]: v for k, v in sides.items() if k.startswith("decoder_")}}
    ref = post_ref.Transformer(n_src_vocab, n_trg_vocab, PAD, PAD, **{**sizes, **encoder})
    if decoder != encoder:
        d_model = sizes.get("d_model", 512)
        scale_emb = sizes.get("scale_emb_or_prj", "prj") == "emb" and sizes.get("trg_emb_prj_weight_sharing", True)
        ref.decoder = post_ref.Decoder(n_trg_vocab=n_trg_vocab, n_position=sizes.get("n_position", 200),
                                       d_word_vec=d_model, d_model=d_model, pad_idx=PAD,
                                       dropout=sizes.get("dropout", 0.1), scale_emb=scale_emb, **decoder)
        if sizes.get("trg_emb_prj_weight_sharing", True):
            ref.trg_word_prj.weight = ref.decoder.trg_word_emb.weight
        if sizes.get("emb_src_trg_weight_sharing", True):
            ref.encoder.src_word_emb.weight = ref.decoder.trg_word_emb.weight
    return ref


def batch(n_src_vocab, n_trg_vocab, seed=0):
    """A padded batch: src (3, 11), trg (3, 9) and gold (27,), with PAD tails of different lengths."""
    rng = np.random.default_rng(seed)
    src = rng.integers(2, n_src_vocab, (3, 11))
    trg = rng.integers(2, n_trg_vocab, (3, 9))
    src[0, 7:] = PAD
    src[2, 10:] = PAD
    trg[1, 5:] = PAD
    trg[2, 8:] = PAD
    gold = np.concatenate([trg[:, 1:], np.full((3, 1), PAD)], axis=1).reshape(-1)
    return src, trg, gold


def build(size, n_src_vocab, n_trg_vocab, options, torch_seed=0):
    config = SMALL if size == "small" else BASE
    torch.manual_seed(torch_seed)
    ref = reference_transformer(n_src_vocab, n_trg_vocab, config, options).eval()
    model = ct.nn.Transformer(n_src_vocab, n_trg_vocab, PAD, PAD, **config, **options).eval()
    return model, ref


def float64_grads(ref, size, n_src, n_trg, options, src, trg, gold):
    """The float64 twin of ref after the same loss.backward()."""
    config = SMALL if size == "small" else BASE
    twin = float64_copy(ref, lambda: reference_transformer(n_src, n_trg, config, options))
    logits, *_ = post_ref.forward_with_attns(twin, torch.from_numpy(src), torch.from_numpy(trg))
    torch.nn.functional.cross_entropy(logits, torch.from_numpy(gold), ignore_index=PAD).backward()
    return twin


def off_the_knife_edge(model, ref, size, n_src, n_trg, options, src, trg, gold):
    """Moves every ReLU unit of ref off float32's knife edge for this batch, then gives model the same
    weights; checks the margins that result (reference.parity)."""
    config = SMALL if size == "small" else BASE
    build_ref = lambda: reference_transformer(n_src, n_trg, config, options)  # noqa: E731
    forward = lambda m: m(torch.from_numpy(src), torch.from_numpy(trg))  # noqa: E731
    clear_relu_knife_edges(ref, build_ref, forward)
    torch_to_ct(ref, model)
    assert_relu_margins(ref, build_ref, forward)


def run_both(model, ref, src, trg, gold):
    out, enc_slf, dec_slf, dec_enc = model(src, trg, return_attns=True)
    rout, renc_slf, rdec_slf, rdec_enc = post_ref.forward_with_attns(ref, torch.from_numpy(src),
                                                                      torch.from_numpy(trg))
    loss = ct.functional.cross_entropy(out, gold, ignore_index=PAD)
    rloss = torch.nn.functional.cross_entropy(rout, torch.from_numpy(gold), ignore_index=PAD)
    return (out, enc_slf, dec_slf, dec_enc, loss), (rout, renc_slf, rdec_slf, rdec_enc, rloss)


def assert_same_results(ours, theirs, tol):
    out, enc_slf, dec_slf, dec_enc, loss = ours
    rout, renc_slf, rdec_slf, rdec_enc, rloss = theirs
    assert_close(out, rout, rtol=tol["rtol"], atol=tol["atol"], what="logits")
    for name, a_list, e_list in (("enc_slf", enc_slf, renc_slf), ("dec_slf", dec_slf, rdec_slf),
                                 ("dec_enc", dec_enc, rdec_enc)):
        assert len(a_list) == len(e_list)
        for i, (a, e) in enumerate(zip(a_list, e_list)):
            assert_close(a, e, rtol=tol["rtol"], atol=tol["atol"], what=f"{name}[{i}]")
    assert loss.item() == pytest.approx(rloss.item(), rel=tol["loss"])


@pytest.mark.parametrize("name,size,n_src,n_trg,options", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_torch_to_ctransformer_parity(name, size, n_src, n_trg, options):
    """torch's weights loaded into ctransformer: logits, attentions, loss, every parameter's gradient."""
    model, ref = build(size, n_src, n_trg, options)
    assert_state_dict_layout(model, ref)
    torch_to_ct(ref, model)
    data = batch(n_src, n_trg)
    off_the_knife_edge(model, ref, size, n_src, n_trg, options, *data)
    ours, theirs = run_both(model, ref, *data)
    assert_same_results(ours, theirs, TOL[size])
    ours[-1].backward()
    theirs[-1].backward()
    assert_grads_close(model, ref, rel=TOL[size]["grad"])
    assert_grads_close(model, float64_grads(ref, size, n_src, n_trg, options, *data), rel=1e-5)


@pytest.mark.parametrize("size", ["small", "base"])
def test_ctransformer_to_torch_parity(size):
    """ctransformer's own initialisation loaded into torch: the same numbers come out."""
    ct.manual_seed(11)
    model, ref = build(size, 41, 41, {})
    ct_to_torch(model, ref)
    data = batch(41, 41, seed=1)
    off_the_knife_edge(model, ref, size, 41, 41, {}, *data)
    ours, theirs = run_both(model, ref, *data)
    assert_same_results(ours, theirs, TOL[size])
    ours[-1].backward()
    theirs[-1].backward()
    assert_grads_close(model, ref, rel=TOL[size]["grad"])
    assert_grads_close(model, float64_grads(ref, size, 41, 41, {}, *data), rel=1e-5)


def test_state_dict_round_trip_both_ways():
    src, trg, _ = batch(41, 41)
    ct.manual_seed(5)
    model, ref = build("small", 41, 41, {})
    ct_to_torch(model, ref)
    # ct -> torch -> ct: bit-identical outputs
    again = ct.nn.Transformer(41, 41, PAD, PAD, **SMALL).eval()
    torch_to_ct(ref, again)
    np.testing.assert_array_equal(again(src, trg).numpy(), model(src, trg).numpy())
    # torch -> ct -> torch: the same arrays under the same names
    torch.manual_seed(6)
    ref2 = post_ref.Transformer(41, 41, PAD, PAD, **SMALL)
    torch_to_ct(ref2, model)
    back = model.state_dict()
    for name, value in ref2.state_dict().items():
        np.testing.assert_array_equal(back[name], value.numpy(), err_msg=name)
    ct_to_torch(model, ref)
    np.testing.assert_array_equal(ref(torch.from_numpy(src), torch.from_numpy(trg)).detach().numpy(),
                                  ref2.eval()(torch.from_numpy(src), torch.from_numpy(trg)).detach().numpy())


@pytest.mark.parametrize("name,size,n_src,n_trg,options", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_parameter_names_and_counts_match_torch(name, size, n_src, n_trg, options):
    model, ref = build(size, n_src, n_trg, options)
    assert_state_dict_layout(model, ref)
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in ref.named_parameters()]
    assert model.num_parameters() == sum(p.numel() for p in ref.parameters())
    assert len(model.parameters()) == len(list(ref.parameters()))
    buffers = [n for n, _ in model.named_buffers()]
    assert buffers == ["encoder.position_enc.pos_table", "decoder.position_enc.pos_table"]
    assert not any(n.endswith("pos_table") for n, _ in model.named_parameters())


def test_weight_tying_is_one_tensor_with_the_summed_gradient():
    """trg_word_prj.weight = decoder.trg_word_emb.weight = encoder.src_word_emb.weight: one tensor,
    listed once by parameters(), under all three names in state_dict(), and its gradient is the sum over
    the three uses: it equals the tied torch model's, and the sum of an UNtied torch model's three
    gradients (with scale_emb_or_prj='none', so both models compute the same function)."""
    model, ref = build("small", 41, 41, dict(scale_emb_or_prj="none"))
    names = ["encoder.src_word_emb.weight", "decoder.trg_word_emb.weight", "trg_word_prj.weight"]
    assert all(n in model.state_dict() for n in names)
    param_names = [n for n, _ in model.named_parameters()]
    assert names[0] in param_names and names[1] not in param_names and names[2] not in param_names
    shared = model.trg_word_prj.weight.numpy()
    assert np.shares_memory(shared, model.decoder.trg_word_emb.weight.numpy())
    assert np.shares_memory(shared, model.encoder.src_word_emb.weight.numpy())

    # Off the ReLU knife edge first, as every gradient test here (module docstring): the shifted weights go to
    # model, and to the untied twin below, which computes the same function of them.
    src, trg, gold = batch(41, 41)
    off_the_knife_edge(model, ref, "small", 41, 41, dict(scale_emb_or_prj="none"), src, trg, gold)
    torch.manual_seed(1)
    untied = post_ref.Transformer(41, 41, PAD, PAD, **SMALL, scale_emb_or_prj="none",
                                  trg_emb_prj_weight_sharing=False, emb_src_trg_weight_sharing=False).eval()
    untied.load_state_dict(ref.state_dict())
    ours, theirs = run_both(model, ref, src, trg, gold)
    ours[-1].backward()
    theirs[-1].backward()
    torch.nn.functional.cross_entropy(untied(torch.from_numpy(src), torch.from_numpy(trg)), torch.from_numpy(gold),
                                      ignore_index=PAD).backward()
    grad = model.trg_word_prj.weight.grad.numpy()
    assert_close(grad, ref.trg_word_prj.weight.grad, rtol=1e-4, atol=1e-7, what="tied grad")
    total = sum(p.weight.grad for p in (untied.encoder.src_word_emb, untied.decoder.trg_word_emb,
                                        untied.trg_word_prj))
    assert_close(grad, total, rtol=1e-4, atol=1e-7, what="sum over uses")
    # padding_idx: no gradient reaches the PAD row through either embedding, only through the projection
    assert_close(grad[PAD], untied.trg_word_prj.weight.grad[PAD], rtol=1e-5, atol=1e-8)


def test_initialisation_follows_the_post_norm_reference():
    """xavier_uniform_ on every parameter of rank > 1 (in parameters() order, before tying); 1-D
    parameters keep torch's defaults. Xavier: |w| <= a = sqrt(6 / (fan_in + fan_out)), std a / sqrt(3)
    (checked within 10%: >= 1024 draws per matrix, standard error of the std about 1.5%)."""
    ct.manual_seed(0)
    model = ct.nn.Transformer(41, 41, PAD, PAD, **SMALL)
    for name, p in model.named_parameters():
        w = p.numpy()
        if w.ndim > 1:
            a = np.sqrt(6.0 / (w.shape[0] + w.shape[1]))
            assert np.abs(w).max() <= a, name
            assert abs(w.std() / (a / np.sqrt(3)) - 1) < 0.1, name
        elif "layer_norm.weight" in name:
            np.testing.assert_array_equal(w, 1.0)
        elif "layer_norm.bias" in name:
            np.testing.assert_array_equal(w, 0.0)
        else:   # Linear biases: torch's U(-1/sqrt(in), 1/sqrt(in))
            fan_in = 32 if ".w_1." in name else 64
            assert np.abs(w).max() <= 1 / np.sqrt(fan_in), name
    # xavier overwrote the embedding's zeroed PAD row, as in jadore801120's code
    assert np.abs(model.decoder.trg_word_emb.weight.numpy()[PAD]).max() > 0
    # manual_seed makes construction reproducible
    ct.manual_seed(0)
    again = ct.nn.Transformer(41, 41, PAD, PAD, **SMALL)
    for (n, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items()):
        np.testing.assert_array_equal(a, b, err_msg=n)


def test_dropout_train_and_eval():
    src, trg, _ = batch(41, 41)
    model = ct.nn.Transformer(41, 41, PAD, PAD, **SMALL)
    assert model.training
    first, second = model(src, trg).numpy(), model(src, trg).numpy()
    assert not np.array_equal(first, second)
    model.eval()
    assert not model.training and not model.encoder.layer_stack[0].slf_attn.attention.dropout.training
    np.testing.assert_array_equal(model(src, trg).numpy(), model(src, trg).numpy())
    model.train()
    assert model.decoder.layer_stack[1].pos_ffn.dropout.training


def test_encode_decode_project_reproduce_forward_and_are_causal():
    """The halves used for decoding step by step give forward's logits, and position i of the decoder
    output does not depend on target tokens after i (the no-peek mask)."""
    torch.manual_seed(0)
    model = ct.nn.Transformer(41, 41, PAD, PAD, **SMALL).eval()
    src, trg, _ = batch(41, 41)
    src_mask = ct.nn.get_pad_mask(src, PAD)
    trg_mask = ct.nn.get_pad_mask(trg, PAD) & ct.nn.get_subsequent_mask(trg)
    enc = model.encode(src, src_mask)
    dec = model.decode(trg, trg_mask, enc, src_mask)
    logits = model.project(dec)
    assert logits.shape == (3, 9, 41)
    assert_close(logits.numpy().reshape(-1, 41), model(src, trg), rtol=0, atol=0)

    enc_out, enc_attns = model.encode(src, src_mask, return_attns=True)
    assert len(enc_attns) == 2 and enc_attns[0].shape == (3, 4, 11, 11)
    dec_out, slf, cross = model.decode(trg, trg_mask, enc, src_mask, return_attns=True)
    assert slf[1].shape == (3, 4, 9, 9) and cross[1].shape == (3, 4, 9, 11)

    prefix = trg[:, :4]
    prefix_mask = ct.nn.get_pad_mask(prefix, PAD) & ct.nn.get_subsequent_mask(prefix)
    short = model.project(model.decode(prefix, prefix_mask, enc, src_mask)).numpy()
    assert_close(short, logits.numpy()[:, :4], rtol=1e-5, atol=1e-6)


def test_int32_ids_and_logit_shapes():
    model = ct.nn.Transformer(41, 41, PAD, PAD, **SMALL).eval()
    src, trg, _ = batch(41, 41)
    out = model(src, trg)
    assert out.shape == (3 * 9, 41)
    np.testing.assert_array_equal(model(src.astype(np.int32), trg.astype(np.int32)).numpy(), out.numpy())


def test_bad_inputs_name_the_argument():
    model = ct.nn.Transformer(41, 41, PAD, PAD, **SMALL, n_position=16).eval()
    src, trg, _ = batch(41, 41)
    with pytest.raises(TypeError, match="src_seq"):
        model(src.astype(np.float32), trg)
    with pytest.raises(TypeError, match="trg_seq"):
        model(src, [["a", "b"]])
    with pytest.raises(ValueError, match="src_seq.*2-D"):
        model(src[0], trg)
    with pytest.raises(ValueError, match="trg_seq.*2-D"):
        model(src, trg[None])
    bad = trg.copy()
    bad[1, 2] = 41
    with pytest.raises(IndexError, match=r"trg_seq.*41 at \(1, 2\).*\[0, 41\)"):
        model(src, bad)
    bad = src.copy()
    bad[0, 0] = -1
    with pytest.raises(IndexError, match="src_seq"):
        model(bad, trg)
    with pytest.raises(ValueError, match="batch size"):
        model(src[:2], trg)
    with pytest.raises(ValueError, match="src_seq.*n_position = 16"):
        model(np.full((3, 17), 3), trg)
    with pytest.raises(ValueError, match="trg_seq"):
        model(src, np.zeros((3, 0), np.int64))
    with pytest.raises(ValueError, match="mask"):
        model.encode(src, np.ones((3, 1, 10), bool))
    with pytest.raises(ValueError, match="scale_emb_or_prj"):
        ct.nn.Transformer(41, 41, PAD, PAD, **SMALL, scale_emb_or_prj="both")
    with pytest.raises(ValueError, match="d_word_vec"):
        ct.nn.Transformer(41, 41, PAD, PAD, d_word_vec=16, d_model=32, d_inner=64, n_layers=1, n_head=4, d_k=8, d_v=8)
    with pytest.raises(ValueError, match="n_src_vocab == n_trg_vocab"):
        ct.nn.Transformer(37, 41, PAD, PAD, **SMALL)
    with pytest.raises(ValueError, match="trg_pad_idx"):
        ct.nn.Transformer(41, 41, PAD, 41, **SMALL)

