"""Bad input raises ValueError / TypeError / IndexError / RuntimeError (never a crash), and the
message names the argument at fault (each test matches a substring of it)."""
import numpy as np
import pytest

import ctransformer as ct
from helpers import rand

F = ct.functional


def t(shape, seed=0, requires_grad=False):
    return ct.tensor(rand(shape, seed=seed), requires_grad=requires_grad)


# ---- ct.tensor and dtypes ------------------------------------------------------------------

@pytest.mark.parametrize("data", [np.arange(4), np.array([True, False]), np.array(["a", "b"]), [1, 2], 3])
def test_tensor_rejects_non_float_data(data):
    with pytest.raises(TypeError, match="data: expected a floating-point array"):
        ct.tensor(data)


def test_tensor_rejects_nan():
    with pytest.raises(ValueError, match=r"data: contains NaN at flat position 2"):
        ct.tensor(np.array([1.0, 2.0, np.nan], np.float32))
    ct.tensor(np.array([np.inf, -np.inf], np.float32))  # infinities are allowed


def test_operator_with_an_unsupported_operand():
    with pytest.raises(TypeError, match="other: expected a ctransformer.Tensor"):
        t((2,)) + "a"
    with pytest.raises(TypeError, match="other: expected a floating-point array"):
        F.add(t((2,)), np.array([1, 2]))


def test_float_token_ids():
    with pytest.raises(TypeError, match="input: expected an integer array of token ids"):
        F.embedding(np.array([0.0, 1.0]), t((3, 2)))


def test_float_targets():
    with pytest.raises(TypeError, match="target: expected an integer array"):
        F.cross_entropy(t((2, 3)), np.array([0.0, 1.0]))


def test_float_mask():
    with pytest.raises(TypeError, match="mask: expected a boolean"):
        F.masked_fill(t((2, 2)), np.ones((2, 2), np.float32), 0.0)
    with pytest.raises(TypeError, match="mask: expected a boolean"):
        F.scaled_dot_product_attention(t((1, 2, 4)), t((1, 2, 4)), t((1, 2, 4)), mask=np.ones((1, 1, 2)))


def test_padding_idx_and_dim_of_the_wrong_type():
    with pytest.raises(TypeError, match="padding_idx: expected an int"):
        F.embedding(np.array([0]), t((3, 2)), padding_idx=1.5)
    with pytest.raises(TypeError, match="dim: expected an int"):
        F.sum(t((2, 2)), (0, 1))
    with pytest.raises(TypeError, match="dim: expected an int"):
        t((2, 2)).mean(dim=0.5)


# ---- wrong rank / mismatched shapes ------------------------------------------------------

def test_matmul_rank_and_inner_dimensions():
    with pytest.raises(ValueError, match=r"matmul: input and other need rank >= 2 \(got input \(3,\)"):
        F.matmul(t((3,)), t((3, 2)))
    with pytest.raises(ValueError, match=r"inner dimensions differ: input \(2, 3\) has 3 columns, other \(4, 5\)"):
        t((2, 3)) @ t((4, 5))
    with pytest.raises(ValueError, match=r"batch dimensions.*input of shape \(2,\) and other of shape \(3,\)"):
        F.matmul(t((2, 1, 2)), t((3, 2, 1)))


@pytest.mark.parametrize("fn", [F.add, F.sub, F.mul, F.div])
def test_broadcast_mismatch(fn):
    with pytest.raises(ValueError, match=r"input of shape \(2, 3\) and other of shape \(4,\) cannot be broadcast"):
        fn(t((2, 3)), t((4,)))


def test_linear_shapes():
    with pytest.raises(ValueError, match="linear: weight must have rank 2"):
        F.linear(t((2, 3)), t((3,)))
    with pytest.raises(ValueError, match="input's last dimension must be in_features = 4"):
        F.linear(t((2, 3)), t((5, 4)))
    with pytest.raises(ValueError, match=r"bias must have shape \(5,\)"):
        F.linear(t((2, 4)), t((5, 4)), t((4,)))


def test_layer_norm_shapes():
    with pytest.raises(ValueError, match=r"layer_norm: weight must have shape \(4,\)"):
        F.layer_norm(t((2, 4)), t((3,)))
    with pytest.raises(ValueError, match=r"layer_norm: bias must have shape \(4,\)"):
        F.layer_norm(t((2, 4)), None, t((2, 4)))
    with pytest.raises(ValueError, match="layer_norm: eps must be >= 0"):
        F.layer_norm(t((2, 4)), eps=-1.0)


def test_embedding_weight_rank_and_padding_idx():
    with pytest.raises(ValueError, match="embedding: weight must have rank 2"):
        F.embedding(np.array([0]), t((3,)))
    with pytest.raises(IndexError, match="padding_idx must be within num_embeddings = 3, got 3"):
        F.embedding(np.array([0]), t((3, 2)), padding_idx=3)
    with pytest.raises(IndexError, match="padding_idx must be within num_embeddings = 3, got -4"):
        F.embedding(np.array([0]), t((3, 2)), padding_idx=-4)


@pytest.mark.parametrize("bad", [5, -1])
def test_token_id_outside_the_embedding(bad):
    with pytest.raises(IndexError, match=rf"token id {bad} at flat position 2 is outside the vocabulary \[0, 5\)"):
        F.embedding(np.array([[0, 1], [bad, 2]]), t((5, 3)))


def test_masked_fill_mask_shape():
    with pytest.raises(ValueError, match=r"masked_fill: input of shape \(2, 3\) and mask of shape \(2,\)"):
        F.masked_fill(t((2, 3)), np.ones(2, bool), 0.0)
    with pytest.raises(ValueError, match=r"masked_fill: mask of shape \(2, 2, 3\) must broadcast to the input"):
        F.masked_fill(t((2, 3)), np.ones((2, 2, 3), bool), 0.0)


def test_attention_shapes():
    with pytest.raises(ValueError, match="q, k and v need rank >= 2"):
        F.scaled_dot_product_attention(t((4,)), t((2, 4)), t((2, 4)))
    with pytest.raises(ValueError, match="q and k must share their last dimension d_k"):
        F.scaled_dot_product_attention(t((1, 2, 4)), t((1, 2, 3)), t((1, 2, 4)))
    with pytest.raises(ValueError, match=r"k and v must have the same length"):
        F.scaled_dot_product_attention(t((1, 2, 4)), t((1, 3, 4)), t((1, 2, 4)))
    with pytest.raises(ValueError, match=r"mask of shape \(2, 1, 4\) must broadcast to the scores' shape"):
        F.scaled_dot_product_attention(t((2, 3, 4)), t((2, 5, 4)), t((2, 5, 4)), mask=np.ones((2, 1, 4), bool))


def test_cross_entropy_shapes():
    with pytest.raises(ValueError, match="cross_entropy: input \\(logits\\) must have rank 2"):
        F.cross_entropy(t((2, 3, 4)), np.zeros(2, np.int64))
    with pytest.raises(ValueError, match=r"target must have shape \(2,\)"):
        F.cross_entropy(t((2, 3)), np.zeros((2, 1), np.int64))
    with pytest.raises(ValueError, match="label_smoothing must be in \\[0, 1\\]"):
        F.cross_entropy(t((2, 3)), np.zeros(2, np.int64), label_smoothing=1.5)


@pytest.mark.parametrize("bad", [3, -1, 7])
def test_cross_entropy_target_out_of_range(bad):
    with pytest.raises(IndexError, match=rf"cross_entropy: target {bad} at position 1 is outside the classes \[0, 3\)"):
        F.cross_entropy(t((2, 3)), np.array([0, bad]))


def test_kl_div_shapes():
    with pytest.raises(ValueError, match=r"kl_div: target must have the input's shape \(2, 3\)"):
        F.kl_div(t((2, 3)), t((3, 2)))


def test_reshape_and_permute():
    with pytest.raises(ValueError, match=r"reshape: shape \(4, 4\) is invalid for input of shape \(2, 3\)"):
        F.reshape(t((2, 3)), [4, 4])
    with pytest.raises(ValueError, match="reshape: only one dimension can be -1"):
        t((2, 3)).reshape(-1, -1)
    with pytest.raises(ValueError, match="permute: dims must list all 3 dimensions"):
        F.permute(t((2, 3, 4)), [0, 1])
    with pytest.raises(ValueError, match="permute: dimension 0 repeats in dims"):
        F.permute(t((2, 3)), [0, 0])


def test_backward_grad_shape_and_item():
    x = t((2, 3), requires_grad=True)
    with pytest.raises(ValueError, match=r"backward: grad must have the output's shape \(2, 3\)"):
        (x * 1.0).backward(ct.ones((3,)))
    with pytest.raises(ValueError, match="item: only a one-element tensor"):
        x.item()
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
        len(x.sum())


# ---- dims out of range ----------------------------------------------------------------------

@pytest.mark.parametrize("call,what", [
    (lambda x: F.softmax(x, 2), r"softmax \(dim\)"),
    (lambda x: F.log_softmax(x, -3), r"log_softmax \(dim\)"),
    (lambda x: F.sum(x, -3), r"sum \(dim\)"),
    (lambda x: x.mean(dim=2), r"mean \(dim\)"),
    (lambda x: F.transpose(x, -3, 0), r"transpose \(dim0\)"),
    (lambda x: x.transpose(0, 5), r"transpose \(dim1\)"),
    (lambda x: F.permute(x, [0, -3]), r"permute \(dims\)"),
])
def test_dim_out_of_range(call, what):
    with pytest.raises(IndexError, match=what + r": dimension out of range \(expected to be in range of \[-2, 1\]"):
        call(t((2, 3)))


# ---- value ranges and strings ----------------------------------------------------------------

@pytest.mark.parametrize("p", [-0.1, 1.5, float("nan")])
def test_dropout_p_outside_unit_interval(p):
    with pytest.raises(ValueError, match="dropout: p must be a probability in \\[0, 1\\]"):
        F.dropout(t((3,)), p=p)
    with pytest.raises(ValueError, match="dropout: p must be a probability"):
        F.scaled_dot_product_attention(t((1, 2, 4)), t((1, 2, 4)), t((1, 2, 4)), dropout_p=p)


def test_bad_reduction_strings():
    with pytest.raises(ValueError, match="cross_entropy: reduction must be 'mean', 'sum' or 'none', got 'avg'"):
        F.cross_entropy(t((2, 3)), np.zeros(2, np.int64), reduction="avg")
    with pytest.raises(ValueError, match="cross_entropy: reduction must be .* got 'batchmean'"):
        F.cross_entropy(t((2, 3)), np.zeros(2, np.int64), reduction="batchmean")
    with pytest.raises(ValueError, match="kl_div: reduction must be 'mean', 'sum', 'batchmean' or 'none', got 'Sum'"):
        F.kl_div(t((2, 3)), t((2, 3)), reduction="Sum")


def test_set_num_threads():
    with pytest.raises(ValueError, match="set_num_threads: n must be >= 1"):
        ct.set_num_threads(0)


def test_errors_leave_no_half_built_graph():
    """A failing op must not leave the inputs in a broken state: the next backward works."""
    x = t((2, 3), requires_grad=True)
    with pytest.raises(ValueError):
        F.matmul(x, x)
    (x * 2.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 3), 2.0, np.float32))


# ---- integers from Python: any int is taken, then range-checked with the argument's name (issue 13) --

@pytest.mark.parametrize("make,arg", [
    (lambda v: ct.nn.Linear(v, 2), "Linear: in_features"),
    (lambda v: ct.nn.Linear(2, v), "Linear: out_features"),
    (lambda v: ct.nn.Embedding(v, 2), "Embedding: num_embeddings"),
    (lambda v: ct.nn.Embedding(2, v), "Embedding: embedding_dim"),
    (lambda v: ct.nn.LayerNorm(v), "LayerNorm: normalized_shape"),
    (lambda v: ct.nn.PositionalEncoding(4, v), "PositionalEncoding: n_position"),
    (lambda v: ct.nn.GPT(v, 8, 1, 8, 2, 16, 0.0), "GPT: vocab_size"),
    (lambda v: ct.nn.GPT(10, 8, 1, 8, 2, v, 0.0), "GPT: d_inner"),
    (lambda v: ct.optim.StepLR(ct.optim.Adam([ct.zeros([1], requires_grad=True)]), v), "StepLR: step_size"),
    (lambda v: ct.nn.Transformer(v, 10, 0, 0), "Transformer: n_src_vocab"),
    (lambda v: ct.nn.Transformer(10, 10, 0, 0, n_position=v), "Transformer: n_position"),
    (lambda v: ct.nn.Transformer.small_pre_norm(d_model=v), "Transformer.small_pre_norm: d_model"),
    (lambda v: ct.nn.TransformerConfig(n_layers=v), "TransformerConfig: n_layers"),
    (lambda v: ct.nn.Encoder(10, 8, 1, 2, 4, 4, 8, 16, 0, n_position=v), "Encoder: n_position"),
    (lambda v: ct.nn.Decoder(v, 8, 1, 2, 4, 4, 8, 16, 0), "Decoder: n_trg_vocab"),
    (lambda v: ct.nn.MultiHeadAttention(v, 8, 4, 4), "MultiHeadAttention: n_head"),
    (lambda v: ct.nn.PositionwiseFeedForward(8, v), "PositionwiseFeedForward: d_hid"),
    (lambda v: ct.nn.gpt.SelfAttention(8, v, 0.0), "SelfAttention: num_head"),
    (lambda v: ct.nn.gpt.FFN(v, 8, 0.0), "FFN: embed_dim"),
    (lambda v: ct.nn.gpt.TransformerLayer(8, 2, v, 0.0), "TransformerLayer: feedforward_dim"),
])
@pytest.mark.parametrize("value", [-1, -(2**64), 2**64, 2**200])
def test_integer_arguments_are_range_checked_by_name(make, arg, value):
    with pytest.raises(ValueError, match=arg):
        make(value)


def test_size_arguments_of_ops_are_range_checked():
    x = t((2, 4))
    with pytest.raises(ValueError, match="multi_head_attention: n_head"):
        F.multi_head_attention(x.reshape(1, 2, 4), x.reshape(1, 2, 4), x.reshape(1, 2, 4), 2**64)
    with pytest.raises(ValueError, match="multi_head_attention: n_head must be at least 1"):
        F.multi_head_attention(x.reshape(1, 2, 4), x.reshape(1, 2, 4), x.reshape(1, 2, 4), 0)
    with pytest.raises(ValueError, match="cross_entropy: ignore_index"):
        F.cross_entropy(x, np.array([0, 1]), ignore_index=2**63)
    with pytest.raises(ValueError, match="padding_idx"):
        F.embedding(np.array([0]), t((3, 2)), padding_idx=-(2**63) - 1)
    with pytest.raises(ValueError, match="zeros: shape: negative dimension -3"):
        ct.zeros([2, -3])
    with pytest.raises(TypeError, match="zeros: shape"):
        ct.zeros(3)
    with pytest.raises(ValueError, match="get_pad_mask: pad_idx"):
        ct.nn.get_pad_mask(np.array([[1, 2]]), 2**64)
    with pytest.raises(ValueError, match="TransformerConfig: src_pad_idx"):
        ct.nn.TransformerConfig(src_pad_idx=2**63)


def test_uint64_token_ids_beyond_int64_are_reported_as_themselves():
    with pytest.raises(IndexError, match="18446744073709551615"):
        F.embedding(np.array([1, 2**64 - 1], dtype=np.uint64), t((4, 2)))
    with pytest.raises(IndexError, match="9223372036854775808"):
        F.cross_entropy(t((1, 3)), np.array([2**63], dtype=np.uint64))


def test_library_settings_take_any_int_and_check_it():
    before = ct.get_num_threads()
    for n in [0, -1, 1025, 2**40, 2**64]:
        with pytest.raises(ValueError, match="set_num_threads: n"):
            ct.set_num_threads(n)
    assert ct.get_num_threads() == before
    with pytest.raises(ValueError, match="set_cache_limit: bytes"):
        ct.set_cache_limit(-1)
    with pytest.raises(ValueError, match="manual_seed: seed"):
        ct.manual_seed(2**64)
    state = ct.get_rng_state()
    ct.manual_seed(-1)                       # as torch: taken modulo 2**64
    a = ct.get_rng_state()
    ct.manual_seed(2**64 - 1)
    assert ct.get_rng_state() == a
    ct.set_rng_state(state)


def test_huge_indices_are_out_of_range_not_a_cast_error():
    ct.manual_seed(0)
    m = ct.nn.GPT(10, 8, 2, 8, 2, 16, 0.0)
    for i in [2, -3, 2**64, -(2**70)]:
        with pytest.raises(IndexError, match="transformer: index"):
            m.transformer[i]
    tr = ct.nn.Transformer(10, 10, 0, 0, d_word_vec=8, d_model=8, d_inner=16, n_layers=1, n_head=2, d_k=4, d_v=4,
                           dropout=0.0).eval()
    d = ct.decode.StepDecoder(tr, np.array([[1, 2, 3]]), None)
    for rows in [[2**64], [-1], [5]]:
        with pytest.raises(IndexError, match="row"):
            d.select(rows)


# --- decoding's entry points: a wrong type in any argument is an error naming that argument ----------------

def _decoding_models():
    transformer = ct.nn.Transformer(n_src_vocab=11, n_trg_vocab=11, src_pad_idx=0, trg_pad_idx=0, d_word_vec=16,
                                    d_model=16, d_inner=32, n_layers=1, n_head=2, d_k=8, d_v=8).eval()
    gpt = ct.nn.GPT(11, 8, 1, 16, 2, 32, 0.0).eval()
    return transformer, gpt


def _decoding_calls():
    transformer, gpt = _decoding_models()
    src = np.ones((2, 5), np.int64)
    mask = ct.nn.get_pad_mask(src, 0)
    common = dict(src=src, src_mask=mask, max_len=6, start_symbol=1, end_symbol=2)
    wrong = dict(model="model", src="abc", src_mask=3, max_len="10", start_symbol=1.5, end_symbol="x", use_cache="yes",
                 precision=3, compute_type=3)
    for name, fn, good, extra in [
            ("greedy_decode", ct.decode.greedy_decode, dict(model=transformer, **common), dict(return_logits="no")),
            ("beam_search", ct.decode.beam_search, dict(model=transformer, **common),
             dict(beam_size="4", alpha="0.6", n_best=1.5)),
            ("generate", ct.decode.generate, dict(model=gpt, idx=np.ones((1, 2), np.int64), max_new_tokens=3),
             dict(model=transformer, idx="x", max_new_tokens="3", temperature="hot", top_k=1.5, use_cache="yes",
                  precision=3, compute_type=3))]:
        cases = extra if name == "generate" else {**wrong, **extra}
        for argument, value in cases.items():
            yield pytest.param(fn, good, argument, value, id=f"{name}-{argument}")


@pytest.mark.parametrize("fn,good,argument,value", list(_decoding_calls()))
def test_decoding_names_the_argument_of_the_wrong_type(fn, good, argument, value):
    """Issue 36: ct.decode.greedy_decode("model", ...) failed inside the wrapper with an AttributeError; every
    argument of the wrong type now raises TypeError or ValueError naming it."""
    with pytest.raises((TypeError, ValueError), match=rf"\b{argument}\b") as error:
        fn(**{**good, argument: value})
    assert "incompatible function arguments" not in str(error.value)
    fn(**good)       # and the right types run
