"""Property-based tests of the modules, decoding and optimizers under hostile arguments.

Properties: a constructor or call with valid arguments works (shapes as documented; a forward of
a Linear equals torch's, rtol 1e-5); one with an invalid argument raises one of CLEAR_ERRORS naming
the argument; the process never dies. Sizes that would need more memory than the fuzz run may take
fail with MemoryError (conftest.py caps the address space at +2 GiB).
"""
import math

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ctransformer as ct
from strategies import CLEAR_ERRORS, assert_names, float_arrays, hostile_floats, hostile_ints, shapes

sizes = st.one_of(st.integers(0, 6), hostile_ints)


@given(in_features=sizes, out_features=sizes, bias=st.booleans(), data=st.data())
def test_linear_constructor_and_forward(in_features, out_features, bias, data):
    try:
        layer = ct.nn.Linear(in_features, out_features, bias)
    except CLEAR_ERRORS as error:
        assert not (0 <= in_features <= 6 and 0 <= out_features <= 6), error
        assert_names(error, "in_features", "out_features", "bytes", "features", "shape")
        return
    assert 0 <= in_features and 0 <= out_features
    assume(in_features <= 6 and out_features <= 6)
    x = data.draw(float_arrays(data.draw(shapes(min_dims=0, max_dims=2, max_side=3)) + (in_features,)))
    w = layer.weight.numpy()
    expected = torch.nn.functional.linear(torch.from_numpy(np.array(x)), torch.from_numpy(w),
                                          torch.from_numpy(layer.bias.numpy()) if bias else None)
    out = layer(ct.tensor(x))
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-4)
    wrong = data.draw(st.integers(0, 8).filter(lambda n: n != in_features))
    with pytest.raises(CLEAR_ERRORS) as info:
        layer(ct.zeros([2, wrong]))
    assert_names(info.value, "input", "in_features", "weight", "linear")


@given(num=sizes, dim=sizes, padding_idx=st.one_of(st.none(), st.integers(-8, 8), hostile_ints))
def test_embedding_constructor(num, dim, padding_idx):
    try:
        layer = ct.nn.Embedding(num, dim, padding_idx)
    except CLEAR_ERRORS as error:
        assert_names(error, "num_embeddings", "embedding_dim", "padding_idx", "bytes", "shape")
        return
    assert num >= 0 and dim >= 0
    assert layer.weight.shape == (num, dim)
    if padding_idx is not None:
        assert -num <= padding_idx < num, f"padding_idx {padding_idx} accepted for {num} embeddings"


@given(normalized_shape=sizes, eps=st.one_of(hostile_floats, st.just(1e-5)))
def test_layer_norm_constructor(normalized_shape, eps):
    try:
        layer = ct.nn.LayerNorm(normalized_shape, eps)
    except CLEAR_ERRORS as error:
        assert_names(error, "normalized_shape", "eps", "bytes")
        return
    assert normalized_shape >= 0
    assert eps >= 0, f"eps {eps} accepted"      # NaN and negative eps are refused by the constructor
    assume(0 < normalized_shape <= 6)
    out = layer(ct.ones([2, normalized_shape]))
    assert out.shape == (2, normalized_shape)


GPT_FIELDS = dict(vocab_size=11, max_seq_len=8, n_layers=1, d_model=8, n_head=2, d_inner=16)


@given(field=st.sampled_from(sorted(GPT_FIELDS)), value=st.one_of(sizes, st.integers(7, 9)),
       dropout=st.one_of(st.just(0.0), hostile_floats))
def test_gpt_constructor_with_one_hostile_field(field, value, dropout):
    # From 2**34 layers the weights exceed any machine's memory and are refused up front, naming
    # the layer count; between 1000 and that, the model may be buildable but takes minutes, or passes the
    # fuzz run's address-space cap mid-build (a MemoryError naming the allocation, not the field).
    assume(not (field == "n_layers" and 1000 < value < 2**34))
    cfg = {**GPT_FIELDS, field: value}
    try:
        model = ct.nn.GPT(**cfg, dropout=dropout)
    except CLEAR_ERRORS as error:
        # the core's own checks name the sizes as the GPT's blog post does (embed_dim, num_head, num_layer)
        assert_names(error, field, "dropout", "Dropout", "bytes", "embed_dim", "num_head", "num_layer", "shape")
        return
    assert 0 <= dropout <= 1, f"dropout {dropout} accepted"
    if cfg["n_head"] == 0 or cfg["d_model"] % cfg["n_head"]:
        pytest.fail(f"GPT accepted {cfg}")
    # Zero layers, or zero-sized vocabularies and widths, are degenerate but well defined.
    assume(max(cfg.values()) <= 64 and cfg["max_seq_len"] > 0 and cfg["vocab_size"] > 0)
    idx = np.zeros((1, min(cfg["max_seq_len"], 3)), np.int64)
    logits, _ = model(idx)
    assert logits.shape == (1, idx.shape[1], cfg["vocab_size"])


def small_gpt():
    ct.manual_seed(0)
    model = ct.nn.GPT(**GPT_FIELDS, dropout=0.0)
    model.eval()
    return model


MODEL = small_gpt()


@given(max_new_tokens=st.one_of(st.integers(0, 5), hostile_ints),
       temperature=st.one_of(st.sampled_from([1.0, 0.5, 1e-6, 1e6]), hostile_floats),
       top_k=st.one_of(st.none(), st.integers(-1, 13), hostile_ints), use_cache=st.booleans(),
       prompt=hnp.arrays(np.int64, st.tuples(st.integers(0, 2), st.integers(0, 10)), elements=st.integers(-2, 12)))
def test_generate_at_and_past_its_limits(max_new_tokens, temperature, top_k, use_cache, prompt):
    # Only small valid runs are run to the end: a huge valid max_new_tokens is a long run, not an error.
    # temperature is a float32 in the core: 1e308 is inf there, and refused as such.
    temperature32 = float(np.float32(temperature)) if math.isfinite(temperature) else temperature
    valid = (0 <= max_new_tokens <= 5 and math.isfinite(temperature32) and temperature32 > 0
             and (top_k is None or 1 <= top_k) and prompt.size > 0 and ((prompt >= 0) & (prompt < 11)).all())
    assume(valid or not (max_new_tokens > 5 and math.isfinite(temperature32) and temperature32 > 0
                         and (top_k is None or top_k >= 1) and prompt.size and ((prompt >= 0) & (prompt < 11)).all()))
    try:
        out = ct.decode.generate(MODEL, prompt, max_new_tokens, temperature, top_k, use_cache=use_cache)
    except CLEAR_ERRORS as error:
        assert not valid, error
        assert_names(error, "max_new_tokens", "temperature", "top_k", "idx", "token id", "prompt")
        return
    assert valid, f"generate accepted max_new_tokens={max_new_tokens}, temperature={temperature}, " \
                  f"top_k={top_k}, prompt {prompt.shape}"
    assert out.shape == (prompt.shape[0], prompt.shape[1] + max_new_tokens)
    assert np.array_equal(out[:, :prompt.shape[1]], prompt)
    assert ((out >= 0) & (out < 11)).all()


TRANSFORMER = None


def transformer():
    global TRANSFORMER
    if TRANSFORMER is None:
        ct.manual_seed(0)
        TRANSFORMER = ct.nn.Transformer(9, 9, 0, 0, d_word_vec=8, d_model=8, d_inner=16, n_layers=1, n_head=2,
                                        d_k=4, d_v=4, dropout=0.0)
        TRANSFORMER.eval()
    return TRANSFORMER


@given(max_len=st.one_of(st.integers(1, 5), st.integers(-1, 0), hostile_ints),
       beam_size=st.one_of(st.integers(1, 4), st.integers(-1, 0), hostile_ints),
       alpha=st.one_of(st.sampled_from([0.0, 0.6, 1.0]), hostile_floats),
       start=st.one_of(st.integers(0, 8), st.integers(-2, -1), st.integers(9, 10)),
       src=hnp.arrays(np.int64, st.tuples(st.integers(0, 2), st.integers(0, 4)), elements=st.integers(-1, 9)),
       use_cache=st.booleans(), beam=st.booleans())
def test_greedy_and_beam_search_at_and_past_their_limits(max_len, beam_size, alpha, start, src, use_cache, beam):
    model = transformer()
    src_ok = src.size > 0 and ((src >= 0) & (src < 9)).all()
    mask = ct.nn.get_pad_mask(src, 0) if src.ndim == 2 and src.size else None
    small = 1 <= max_len <= 5 and (not beam or (1 <= beam_size <= 4 and math.isfinite(alpha) and alpha >= 0))
    valid = small and src_ok and 0 <= start < 9
    # Valid but long (huge max_len or beam_size) is a long run, not an error: not run.
    assume(valid or not (src_ok and 0 <= start < 9 and max_len >= 1 and (not beam or (beam_size >= 1
                                                                                        and math.isfinite(alpha)
                                                                                        and alpha >= 0))))
    try:
        if beam:
            ids, scores = ct.decode.beam_search(model, src, mask, max_len, start, 1, beam_size, alpha,
                                                use_cache=use_cache)
        else:
            ids = ct.decode.greedy_decode(model, src, mask, max_len, start, 1, use_cache=use_cache)
    except CLEAR_ERRORS as error:
        assert not valid, error
        assert_names(error, "max_len", "beam_size", "alpha", "start_symbol", "src", "token id", "input")
        return
    assert valid, f"accepted max_len={max_len}, beam_size={beam_size}, alpha={alpha}, start={start}, src {src}"
    assert ids.shape[0] == src.shape[0] and ids.shape[1] <= max_len
    assert (ids[:, 0] == start).all()


@given(lr=st.one_of(st.just(1e-3), hostile_floats), eps=st.one_of(st.just(1e-8), hostile_floats),
       weight_decay=st.one_of(st.just(0.0), hostile_floats),
       betas=st.one_of(st.just((0.9, 0.999)), st.tuples(hostile_floats, st.sampled_from([0.999, 1.0, 1.5]))),
       cls=st.sampled_from(["Adam", "AdamW"]))
def test_optimizer_hyperparameters(lr, eps, weight_decay, betas, cls):
    p = ct.tensor(np.ones(3, np.float32), requires_grad=True)
    good = (math.isfinite(lr) and lr >= 0 and math.isfinite(eps) and eps >= 0 and math.isfinite(weight_decay)
            and weight_decay >= 0 and all(math.isfinite(b) and 0 <= b < 1 for b in betas))
    try:
        opt = getattr(ct.optim, cls)([p], lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    except CLEAR_ERRORS as error:
        assert not good, error
        assert_names(error, "lr", "eps", "weight_decay", "beta")
        return
    # Accepted: a step must run (values torch.optim refuses, e.g. a negative lr, ct may take).
    (p * p).sum().backward()
    opt.step()
    assert p.numpy().shape == (3,)


@given(step_size=st.one_of(st.integers(1, 3), st.integers(-1, 0), hostile_ints),
       gamma=st.one_of(st.just(0.5), hostile_floats), steps=st.integers(0, 5))
def test_step_lr_limits(step_size, gamma, steps):
    opt = ct.optim.Adam([ct.tensor(np.ones(2, np.float32), requires_grad=True)], lr=0.1)
    try:
        sched = ct.optim.StepLR(opt, step_size, gamma)
    except CLEAR_ERRORS as error:
        assert_names(error, "step_size", "gamma")
        return
    assert step_size >= 1, f"step_size {step_size} accepted"
    for _ in range(steps):
        opt.step()
        before = opt.param_groups[0]["lr"]
        try:
            sched.step()
        except ValueError as error:  # the schedule's lr left the finite non-negative numbers
            assert not (0 <= before * gamma < math.inf) or not (0 <= gamma < math.inf), error
            assert_names(error, "lr")
            assert opt.param_groups[0]["lr"] == before  # and the optimizer kept its lr
            return
    lr = opt.param_groups[0]["lr"]
    assert not math.isnan(lr), f"NaN lr from StepLR(step_size={step_size}, gamma={gamma})"
    assert lr == pytest.approx(0.1 * gamma ** (steps // step_size), rel=1e-6, nan_ok=False) or not math.isfinite(gamma)
