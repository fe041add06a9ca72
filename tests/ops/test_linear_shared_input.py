"""functional.linear_of_shared_input: several Linears of one input (a decoding step's q, k and v), each output the
bits of functional.linear of its own. One or two float32 rows read all the weights in one product over the threads;
everything else is the Linears one by one. Equality with linear() is exact where it is exact: the same kernel sums
each output in the same order whichever thread's columns it falls in; linear() itself is held to float64 in
tests/runtime/test_blas.py, and here once more to the float32 bound."""
import numpy as np
import pytest
import torch

import ctransformer as ct
from ctransformer import functional as F

# (rows, in_features, each layer's out_features): GPT-2's q, k, v; a narrow and a wide weight beside a 5-row one;
# a k with a tail after its 16 (8) value vectors; 40 and 33 outputs split nowhere near a weight's edge.
SHAPES = [(1, 768, [768, 768, 768]), (2, 768, [768, 768, 768]), (1, 300, [64, 3000, 5]), (2, 257, [40, 33]),
          (1, 1001, [700])]


def operands(rows, in_f, outs, seed, bias=True):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, 1, in_f)).astype(np.float32)   # (batch, 1, d): a decoding step's rows
    layers = [(rng.standard_normal((n, in_f)).astype(np.float32),
               rng.standard_normal(n).astype(np.float32) if bias and i != 1 else None) for i, n in enumerate(outs)]
    return x, layers


def as_tensors(layers, requires_grad=False):
    return [(ct.tensor(w, requires_grad=requires_grad), None if b is None else ct.tensor(b, requires_grad=requires_grad))
            for w, b in layers]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("rows,in_f,outs", SHAPES)
def test_each_output_is_linears_bits(rows, in_f, outs, threads, num_threads):
    num_threads(threads)
    x, layers = operands(rows, in_f, outs, seed=rows + in_f + len(outs))
    got = F.linear_of_shared_input(ct.tensor(x), as_tensors(layers))
    assert len(got) == len(layers)
    for i, ((w, b), y) in enumerate(zip(layers, got)):
        want = F.linear(ct.tensor(x), ct.tensor(w), None if b is None else ct.tensor(b)).numpy()
        np.testing.assert_array_equal(y.numpy(), want, err_msg=f"layer {i}")
        # and within float32's bound of an (in_f + 1)-term sum against float64 (any summation order meets it)
        x64, w64 = x.astype(np.float64), w.astype(np.float64)
        exact = x64 @ w64.T + (0.0 if b is None else b)
        size = np.abs(x64) @ np.abs(w64).T + (0.0 if b is None else np.abs(b))
        assert y.shape == (rows, 1, len(w))
        assert (np.abs(y.numpy() - exact) <= (in_f + 1) * 2.0**-24 * size).all(), f"layer {i}"


def test_the_same_bits_on_one_and_two_threads(num_threads):
    x, layers = operands(1, 768, [768, 768, 768], seed=5)
    num_threads(1)
    one = [y.numpy() for y in F.linear_of_shared_input(ct.tensor(x), as_tensors(layers))]
    num_threads(2)
    for y, want in zip(F.linear_of_shared_input(ct.tensor(x), as_tensors(layers)), one):
        np.testing.assert_array_equal(y.numpy(), want)


@pytest.mark.parametrize("rows", [3, 8, 40])
def test_more_rows_are_the_linears_one_by_one(rows):
    x = np.random.default_rng(rows).standard_normal((rows, 96)).astype(np.float32)
    _, layers = operands(1, 96, [128, 64], seed=rows)
    for (w, b), y in zip(layers, F.linear_of_shared_input(ct.tensor(x), as_tensors(layers))):
        want = F.linear(ct.tensor(x), ct.tensor(w), None if b is None else ct.tensor(b)).numpy()
        np.testing.assert_array_equal(y.numpy(), want)


def test_gradients_flow_as_through_linear():
    """With a gradient to keep the product is linear()'s: the gradients are torch's (float32, the float32 bound of
    test_blas's linear test, loosened to 1e-5 relative for these 96-term sums)."""
    x, layers = operands(2, 96, [32, 48], seed=7)
    X = ct.tensor(x, requires_grad=True)
    ours = as_tensors(layers, requires_grad=True)
    ys = F.linear_of_shared_input(X, ours)
    (ys[0].sum() + (ys[1] * ys[1]).sum()).backward()
    tx = torch.tensor(x, requires_grad=True)
    theirs = [(torch.tensor(w, requires_grad=True), None if b is None else torch.tensor(b, requires_grad=True))
              for w, b in layers]
    ts = [torch.nn.functional.linear(tx, w, b) for w, b in theirs]
    (ts[0].sum() + (ts[1] * ts[1]).sum()).backward()
    np.testing.assert_allclose(X.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-5)
    for (w, b), (tw, tb) in zip(ours, theirs):
        np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-5)
        if b is not None:
            np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_under_autocast_each_is_linears_bf16_product():
    x, layers = operands(1, 768, [768, 768], seed=9)
    with ct.autocast():
        got = F.linear_of_shared_input(ct.tensor(x), as_tensors(layers))
        want = [F.linear(ct.tensor(x), ct.tensor(w), None if b is None else ct.tensor(b)).numpy() for w, b in layers]
    for y, w in zip(got, want):
        np.testing.assert_array_equal(y.numpy(), w)


def test_bad_operands_are_refused():
    x = ct.tensor(np.ones((1, 8), np.float32))
    w = ct.tensor(np.ones((4, 8), np.float32))
    with pytest.raises(ValueError, match=r"last dimension must be in_features = 6, got input shape \(1, 8\)"):
        F.linear_of_shared_input(x, [(w, None), (ct.tensor(np.ones((4, 6), np.float32)), None)])
    with pytest.raises(ValueError, match=r"bias must have shape \(4,\)"):
        F.linear_of_shared_input(x, [(w, ct.tensor(np.ones(3, np.float32)))])
    with pytest.raises(ValueError, match="weight must have rank 2"):
        F.linear_of_shared_input(x, [(ct.tensor(np.ones(8, np.float32)), None)])
    with pytest.raises(TypeError, match=r"layers\[1\]: expected a \(weight, bias\) tuple"):
        F.linear_of_shared_input(x, [(w, None), w])
    with pytest.raises(ValueError, match="contains NaN|finite"):
        F.linear_of_shared_input(x, [(ct.tensor(np.full((4, 8), np.nan, np.float32)), None)])
    assert F.linear_of_shared_input(x, []) == []
