"""Property-based tests of tensors and the functional ops (hypothesis; profiles in conftest.py).

Properties: a valid call equals PyTorch 2.13 (float32 both sides; tolerances per test: exact where
the op is one rounding per element, rtol 1e-5 + atol 1e-6 scaled by the values where sums are
reordered), NaN and inf propagate where torch's do; an invalid call raises one of CLEAR_ERRORS whose
message names the argument at fault; and the process never dies (a crash fails the run).
"""
import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ctransformer as ct
from ctransformer import functional as F
from strategies import (CLEAR_ERRORS, assert_names, float_arrays, floats, hostile_ints, layouts, non_numbers,
                        shapes)


def c_array(a, dtype=None):
    """A C-ordered copy (torch.from_numpy takes no negative strides; 0-d stays 0-d)."""
    return np.array(a, dtype=dtype, order="C", copy=True)


def same(actual, expected, rtol=0.0, atol=0.0, what=""):
    """Equal shapes; NaN where expected is NaN, inf of the same sign, else within the tolerance."""
    a = actual.numpy() if isinstance(actual, ct.Tensor) else np.asarray(actual)
    e = expected.detach().numpy() if isinstance(expected, torch.Tensor) else np.asarray(expected)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != {e.shape}"
    np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)


# --- tensors ------------------------------------------------------------------------------------

@given(dtype=st.sampled_from([np.float16, np.float32, np.float64]), data=st.data())
def test_tensor_copies_any_float_array_in_any_layout(dtype, data):
    array = data.draw(float_arrays(finite=False, dtype=dtype))
    x = ct.tensor(array)
    expected = array.astype(np.float32)
    assert x.shape == expected.shape and x.numel() == expected.size
    out = x.numpy()
    assert np.array_equal(out, expected, equal_nan=True)
    assert np.array_equal(np.signbit(out), np.signbit(expected))  # -0.0 stays -0.0
    if array.flags.writeable and array.size:
        before = out.copy()
        array[...] = 7  # a copy, not a view of the caller's array
        assert np.array_equal(x.numpy(), before, equal_nan=True)


@given(dtype=st.sampled_from([np.float16, np.float32, np.float64]), data=st.data())
def test_tensor_refuses_nan_naming_the_argument(dtype, data):
    array = data.draw(float_arrays(data.draw(shapes(min_dims=0, max_dims=3, min_side=1, max_side=4)),
                                   dtype=dtype, elements=st.floats(width=16, allow_nan=True)))
    array = np.array(array, order="C")  # reshape(-1) below must be a view
    array.reshape(-1)[data.draw(st.integers(0, array.size - 1))] = np.nan
    with pytest.raises(ValueError) as info:
        ct.tensor(array)
    assert_names(info.value, "data")


@given(array=hnp.arrays(st.sampled_from([np.int8, np.int32, np.int64, np.uint8, np.uint64, np.bool_, np.complex64,
                                         np.dtype("U3"), np.dtype("O")]), shapes(max_dims=3, max_side=3)))
def test_tensor_refuses_non_float_arrays_naming_the_argument(array):
    with pytest.raises(TypeError) as info:
        ct.tensor(array)
    assert_names(info.value, "data")


@given(shape=shapes(max_dims=4))
def test_zeros_and_ones_of_valid_shapes(shape):
    for make, value in ((ct.zeros, 0.0), (ct.ones, 1.0)):
        x = make(list(shape))
        assert x.shape == shape and x.numel() == int(np.prod(shape))
        assert (x.numpy() == value).all()


@given(shape=st.lists(st.one_of(st.integers(0, 3), hostile_ints), min_size=1, max_size=4))
def test_zeros_of_hostile_shapes_raise_or_are_right(shape):
    assume(any(d < 0 or d > 3 for d in shape))
    try:
        x = ct.zeros(shape)
    except CLEAR_ERRORS as error:
        assert_names(error, "shape", "size", "dimension", "bytes", "memory")
    else:
        # Only possible when a zero dimension makes the tensor empty, or it fits in memory.
        assert all(d >= 0 for d in shape)
        assert x.shape == tuple(shape) and x.numel() == int(np.prod(shape, dtype=object))


# --- elementwise --------------------------------------------------------------------------------

BINARY = {"add": (F.add, torch.add), "sub": (F.sub, torch.sub), "mul": (F.mul, torch.mul),
          "div": (F.div, torch.div)}


@given(op=st.sampled_from(sorted(BINARY)), shapes_=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=4,
                                                                                      max_side=5),
       finite=st.booleans(), data=st.data())
def test_binary_ops_broadcast_like_torch(op, shapes_, finite, data):
    a = data.draw(float_arrays(shapes_.input_shapes[0], finite=finite))
    b = data.draw(float_arrays(shapes_.input_shapes[1], finite=finite))
    ours, theirs = BINARY[op]
    out = ours(ct.tensor(a), ct.tensor(b))
    # One rounding per element on both sides: exact (div included: both divide, IEEE).
    same(out, theirs(torch.from_numpy(c_array(a)), torch.from_numpy(c_array(b))), what=op)


@given(op=st.sampled_from(sorted(BINARY)), shapes_=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=1,
                                                                                      max_dims=3, max_side=4),
       data=st.data())
def test_binary_ops_backward_like_torch(op, shapes_, data):
    elements = st.floats(0.5, 2.0, width=32) if op == "div" else floats(finite=True)
    a = data.draw(float_arrays(shapes_.input_shapes[0], elements=elements))
    b = data.draw(float_arrays(shapes_.input_shapes[1], elements=elements))
    ours, theirs = BINARY[op]
    x, y = ct.tensor(a, requires_grad=True), ct.tensor(b, requires_grad=True)
    tx, ty = torch.tensor(np.array(a), requires_grad=True), torch.tensor(np.array(b), requires_grad=True)
    ours(x, y).sum().backward()
    theirs(tx, ty).sum().backward()
    # Broadcast gradients are sums whose order may differ: rtol 1e-5, atol 1e-5 x the largest term.
    for g, tg, what in ((x.grad, tx.grad, "input"), (y.grad, ty.grad, "other")):
        scale = float(np.abs(tg.numpy()).max(initial=1.0))
        same(g, tg, rtol=1e-5, atol=1e-5 * scale, what=f"{op} grad {what}")


@given(op=st.sampled_from(sorted(BINARY)), a=shapes(min_dims=1, max_dims=3, max_side=4),
       b=shapes(min_dims=1, max_dims=3, max_side=4))
def test_binary_ops_refuse_shapes_that_do_not_broadcast(op, a, b):
    try:
        np.broadcast_shapes(a, b)
        assume(False)
    except ValueError:
        pass
    with pytest.raises(ValueError) as info:
        BINARY[op][0](ct.zeros(list(a)), ct.zeros(list(b)))
    assert_names(info.value, "input", "other")


@given(op=st.sampled_from(sorted(BINARY)), other=non_numbers)
def test_binary_ops_refuse_non_numbers(op, other):
    with pytest.raises(CLEAR_ERRORS) as info:
        BINARY[op][0](ct.zeros([2]), other)
    assert_names(info.value, "other", op)


UNARY = {"relu": (F.relu, torch.relu, 0, 0), "gelu": (F.gelu, lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
                                                      1e-5, 1e-6)}


@given(op=st.sampled_from(sorted(UNARY)), array=float_arrays(finite=False))
def test_activations_like_torch_including_nan_and_inf(op, array):
    ours, theirs, rtol, atol = UNARY[op]
    same(ours(ct.tensor(array)), theirs(torch.from_numpy(c_array(array))), rtol=rtol, atol=atol, what=op)


@given(op=st.sampled_from(["softmax", "log_softmax"]), data=st.data())
def test_softmax_like_torch_on_any_valid_dim(op, data):
    array = data.draw(float_arrays(data.draw(shapes(min_dims=1, max_dims=4, max_side=6))))
    dim = data.draw(st.integers(-array.ndim, array.ndim - 1))
    out = getattr(F, op)(ct.tensor(array), dim)
    same(out, getattr(torch, op)(torch.from_numpy(c_array(array)), dim), rtol=1e-5, atol=1e-5, what=op)


@given(op=st.sampled_from(["softmax", "log_softmax", "sum", "mean"]), ndim=st.integers(0, 3),
       dim=st.one_of(st.integers(-6, 6), hostile_ints))
def test_dim_out_of_range_raises_index_error_naming_dim(op, ndim, dim):
    assume(not -ndim <= dim < ndim)
    x = ct.zeros([2] * ndim)
    with pytest.raises((IndexError, ValueError, OverflowError, TypeError)) as info:
        getattr(F, op)(x, dim)
    assert_names(info.value, "dim")


# --- reductions and shapes ----------------------------------------------------------------------

@given(op=st.sampled_from(["sum", "mean"]), keepdim=st.booleans(), data=st.data())
def test_reductions_like_torch(op, keepdim, data):
    array = data.draw(float_arrays(data.draw(shapes(min_dims=0, max_dims=4, max_side=5))))
    # A 0-d input is reduced whole only: torch also takes dim 0 / -1 there, ct raises IndexError
    # (a known difference, docs/proof.md, "Fuzzing").
    dims = st.integers(-array.ndim, array.ndim - 1) if array.ndim else st.nothing()
    dim = data.draw(st.one_of(st.none(), dims))
    t = torch.from_numpy(c_array(array))
    expected = getattr(torch, op)(t) if dim is None else getattr(torch, op)(t, dim, keepdim=keepdim)
    out = getattr(F, op)(ct.tensor(array), dim, keepdim) if dim is not None else getattr(F, op)(ct.tensor(array))
    scale = float(np.abs(array).sum(initial=1.0))
    same(out, expected, rtol=1e-5, atol=1e-6 * scale, what=f"{op}(dim={dim})")


@given(data=st.data())
def test_reshape_transpose_permute_like_numpy(data):
    array = data.draw(float_arrays(data.draw(shapes(min_dims=1, max_dims=4, max_side=4))))
    x = ct.tensor(array)
    perm = data.draw(st.permutations(range(array.ndim)))
    assert np.array_equal(F.permute(x, list(perm)).numpy(), np.transpose(array, perm))
    d0, d1 = data.draw(st.integers(-array.ndim, array.ndim - 1)), data.draw(st.integers(-array.ndim, array.ndim - 1))
    assert np.array_equal(F.transpose(x, d0, d1).numpy(), np.swapaxes(array, d0, d1))
    target = data.draw(shapes(min_dims=1, max_dims=4, max_side=8))
    if int(np.prod(target)) == array.size:
        assert np.array_equal(F.reshape(x, list(target)).numpy(), array.reshape(target))
    else:
        with pytest.raises(ValueError) as info:
            F.reshape(x, list(target))
        assert_names(info.value, "shape")


@given(dims=st.lists(st.one_of(st.integers(-5, 5), hostile_ints), min_size=0, max_size=5))
def test_permute_refuses_anything_but_a_permutation(dims):
    assume(sorted(d % 3 if -3 <= d < 3 else 99 for d in dims) != [0, 1, 2])
    with pytest.raises(CLEAR_ERRORS) as info:
        F.permute(ct.zeros([2, 3, 4]), dims)
    assert_names(info.value, "dim", "permute")


@given(shape=st.lists(st.one_of(st.integers(-3, 30), hostile_ints), min_size=0, max_size=4))
def test_reshape_of_hostile_shapes(shape):
    x = ct.zeros([2, 3, 4])
    try:
        out = F.reshape(x, shape)
    except CLEAR_ERRORS as error:
        assert_names(error, "shape")
    else:
        assert out.shape == np.zeros((2, 3, 4)).reshape(shape).shape


# --- products and normalisation -----------------------------------------------------------------

@given(n=st.integers(0, 6), k=st.integers(0, 6), m=st.integers(0, 6), batch=shapes(max_dims=2, max_side=3),
       data=st.data())
def test_matmul_and_linear_like_torch(n, k, m, batch, data):
    a = data.draw(float_arrays(batch + (n, k)))
    b = data.draw(float_arrays((k, m)))
    bias = data.draw(float_arrays((m,)))
    ta, tb = torch.from_numpy(c_array(a)), torch.from_numpy(c_array(b))
    scale = float(np.abs(a).max(initial=1.0) * np.abs(b).max(initial=1.0) * max(k, 1))
    same(F.matmul(ct.tensor(a), ct.tensor(b)), ta @ tb, rtol=1e-5, atol=1e-6 * scale, what="matmul")
    w = c_array(b.T)
    same(F.linear(ct.tensor(a), ct.tensor(w), ct.tensor(bias)),
         torch.nn.functional.linear(ta, torch.from_numpy(w), torch.from_numpy(c_array(bias))),
         rtol=1e-5, atol=1e-6 * (scale + 1e3), what="linear")


@given(a=shapes(min_dims=1, max_dims=3, max_side=4), b=shapes(min_dims=1, max_dims=3, max_side=4))
def test_matmul_of_mismatched_shapes_raises(a, b):
    try:
        torch.zeros(a) @ torch.zeros(b)
        assume(False)
    except RuntimeError:
        pass
    with pytest.raises(CLEAR_ERRORS) as info:
        F.matmul(ct.zeros(list(a)), ct.zeros(list(b)))
    assert_names(info.value, "input", "other", "matmul")


@given(shape=shapes(min_dims=1, max_dims=3, min_side=1, max_side=6), eps=st.sampled_from([1e-5, 1e-3, 1.0]),
       data=st.data())
def test_layer_norm_like_torch(shape, eps, data):
    array = data.draw(float_arrays(shape))
    w, b = data.draw(float_arrays(shape[-1:])), data.draw(float_arrays(shape[-1:]))
    out = F.layer_norm(ct.tensor(array), ct.tensor(w), ct.tensor(b), eps)
    expected = torch.nn.functional.layer_norm(torch.from_numpy(c_array(array)), shape[-1:],
                                              torch.from_numpy(c_array(w)), torch.from_numpy(c_array(b)), eps)
    scale = float(np.abs(w).max(initial=1.0) * (1 + np.abs(array).max(initial=0) / np.sqrt(eps)) + 1e3)
    same(out, expected, rtol=1e-4, atol=1e-5 * scale, what="layer_norm")


# --- ids, masks, targets ------------------------------------------------------------------------

ID_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


@given(dtype=st.sampled_from(ID_DTYPES), shape=shapes(max_dims=3, max_side=4), vocab=st.integers(1, 9),
       data=st.data())
def test_embedding_takes_valid_ids_and_names_out_of_range_ones(dtype, shape, vocab, data):
    info = np.iinfo(dtype)
    ids = data.draw(hnp.arrays(dtype, shape, elements=st.integers(max(info.min, -3), min(info.max, 12))))
    ids = data.draw(layouts(ids))
    weight = np.arange(vocab * 3, dtype=np.float32).reshape(vocab, 3)
    valid = ((ids >= 0) & (ids < vocab)).all()
    try:
        out = F.embedding(ids, ct.tensor(weight))
    except TypeError as error:  # a dtype the op does not take (ids must be int32/int64)
        assert dtype not in (np.int32, np.int64), error
        assert_names(error, "input", "ids")
    except IndexError as error:
        assert not valid, error
        assert_names(error, "token id", "input")
    else:
        assert valid
        assert np.array_equal(out.numpy(), weight[ids.astype(np.int64)])


@given(ids=st.sampled_from([np.array([2 ** 63 - 1]), np.array([-(2 ** 63)]), np.array([2 ** 31]),
                            np.array([[0, 1], [2, 2 ** 40]]), np.array(3), np.zeros((0, 2), np.int64)]))
def test_embedding_extreme_ids(ids):
    weight = ct.zeros([4, 2])
    try:
        out = F.embedding(ids, weight)
    except IndexError as error:
        assert_names(error, "token id", "input")
    else:
        assert out.shape == ids.shape + (2,)


@given(shape=shapes(min_dims=1, max_dims=3, max_side=3), mask_shape=shapes(max_dims=4, max_side=3),
       mask_dtype=st.sampled_from([np.bool_, np.bool_, np.int64, np.float32, np.uint8]), data=st.data())
def test_masked_fill_with_masks_of_every_shape(shape, mask_shape, mask_dtype, data):
    array = data.draw(float_arrays(shape))
    mask = data.draw(layouts(data.draw(hnp.arrays(np.bool_, mask_shape)).astype(mask_dtype)))
    try:
        out_shape = np.broadcast_shapes(shape, mask_shape)
        fits = out_shape == shape
    except ValueError:
        fits = False
    try:
        out = F.masked_fill(ct.tensor(array), mask, -1e9)
    except CLEAR_ERRORS as error:
        if fits and mask_dtype == np.bool_:
            raise
        assert_names(error, "mask")
    else:
        assert fits, f"mask {mask_shape} accepted for input {shape}"
        expected = torch.from_numpy(c_array(array)).masked_fill(torch.from_numpy(c_array(mask, bool)), -1e9)
        same(out, expected, what="masked_fill")


@given(b=st.integers(1, 2), h=st.integers(1, 2), lq=st.integers(1, 4), lk=st.integers(1, 4), d=st.integers(1, 4),
       mask_shape=st.one_of(st.none(), shapes(max_dims=5, max_side=4)), data=st.data())
def test_attention_masks_of_every_shape(b, h, lq, lk, d, mask_shape, data):
    q = data.draw(float_arrays((b, h, lq, d)))
    k = data.draw(float_arrays((b, h, lk, d)))
    v = data.draw(float_arrays((b, h, lk, d)))
    mask = None if mask_shape is None else data.draw(hnp.arrays(np.bool_, mask_shape))
    fits = True
    if mask is not None:
        try:
            fits = len(mask_shape) <= 4 and np.broadcast_shapes((b, h, lq, lk), mask_shape) == (b, h, lq, lk)
        except ValueError:
            fits = False
    try:
        out = F.scaled_dot_product_attention(ct.tensor(q), ct.tensor(k), ct.tensor(v), mask)
    except CLEAR_ERRORS as error:
        assert not fits, error
        assert_names(error, "mask")
        return
    assert fits, f"mask {mask_shape} accepted for scores {(b, h, lq, lk)}"
    out = out[0] if isinstance(out, tuple) else out
    tq, tk, tv = (torch.from_numpy(c_array(a)) for a in (q, k, v))
    scores = tq @ tk.transpose(-1, -2) / np.sqrt(d)  # ct's scale (1/sqrt(d)); the post-norm model's -1e9 fill
    if mask is not None:
        scores = scores.masked_fill(~torch.from_numpy(c_array(mask)), -1e9)
    expected = torch.softmax(scores, -1) @ tv
    scale = float(np.abs(v).max(initial=1.0))
    same(out, expected, rtol=1e-4, atol=1e-5 * scale, what="attention")


@given(n=st.integers(1, 5), c=st.integers(1, 6), ignore_index=st.sampled_from([-100, 0, 2]),
       label_smoothing=st.sampled_from([0.0, 0.1]), reduction=st.sampled_from(["mean", "sum", "none"]), data=st.data())
def test_cross_entropy_like_torch_and_names_bad_targets(n, c, ignore_index, label_smoothing, reduction, data):
    logits = data.draw(float_arrays((n, c)))
    targets = data.draw(hnp.arrays(np.int64, (n,), elements=st.integers(-3, c + 2)))
    valid = all(0 <= t < c or t == ignore_index for t in targets)
    try:
        out = F.cross_entropy(ct.tensor(logits), targets, ignore_index=ignore_index, reduction=reduction,
                              label_smoothing=label_smoothing)
    except IndexError as error:
        assert not valid, error
        assert_names(error, "target")
        return
    assert valid, f"targets {targets} accepted for {c} classes"
    expected = torch.nn.functional.cross_entropy(torch.from_numpy(c_array(logits)), torch.from_numpy(targets),
                                                 ignore_index=ignore_index, reduction=reduction,
                                                 label_smoothing=label_smoothing)
    same(out, expected, rtol=1e-5, atol=1e-5 * float(np.abs(logits).max(initial=1.0)), what="cross_entropy")


@given(p=st.one_of(st.floats(allow_nan=True), st.sampled_from([0.0, 1.0, -0.0, 1 + 1e-7, -1e-7])))
def test_dropout_probability_limits(p):
    x = ct.ones([64])
    p32 = float(np.float32(p))  # p is a float32 in the core: -1e-107 is -0.0 there
    try:
        out = F.dropout(x, p, True)
    except ValueError as error:
        assert not 0 <= p32 <= 1, error
        assert_names(error, "p")
    else:
        assert 0 <= p32 <= 1, f"p={p} accepted"
        kept = np.unique(out.numpy())
        assert ((kept == 0) | np.isclose(kept, 1 / (1 - p32) if p32 < 1 else 0, rtol=1e-6)).all(), kept
