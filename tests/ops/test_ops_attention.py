"""scaled_dot_product_attention against the post-norm reference (jadore801120's ScaledDotProductAttention):

    attn = softmax((q / d_k ** 0.5) @ k.transpose(-2, -1), masked_fill(mask == 0, fill), dim=-1)
    out = attn @ v

Both outputs are checked, and the gradients of q, k and v through a random weighting of both
outputs. Masks are boolean (True = may attend) and broadcast from (b, 1, Lk) and (b, 1, Lq, Lk).
With fill = -inf a fully masked row is NaN in torch's reference (softmax of all -inf); ours must
be NaN at exactly the same places (equal_nan), in the outputs and in the gradients.

Tolerance: rtol 1e-5, atol 1e-6 for out and attn (two small float32 products and a softmax);
gradients rtol 1e-5, atol 1e-5 (three chained products whose summation order differs from torch's).
"""
import numpy as np
import pytest
import torch

import ctransformer as ct
from helpers import assert_close, pair, rand
from upstream import upstream
from kernel_levels import every_level

# Every test at each level's attention's rows (kernels/simd/attention.cpp) and the small products.
at_every_level = every_level("loops")

F = ct.functional


def reference(q, k, v, mask, fill):
    d_k = q.shape[-1]
    attn = torch.matmul(q / d_k ** 0.5, k.transpose(-2, -1))
    if mask is not None:
        attn = attn.masked_fill(torch.from_numpy(mask) == 0, fill)
    attn = torch.softmax(attn, dim=-1)
    return torch.matmul(attn, v), attn


def padding_mask(b, lk, lengths):
    """(b, 1, Lk): key j of batch item i is real when j < lengths[i] (0 = fully masked)."""
    return (np.arange(lk)[None, None, :] < np.array(lengths)[:, None, None])


def check(q_shape, k_shape, v_shape, mask, fill, seed=0):
    q, tq = pair(rand(q_shape, seed=seed + 1))
    k, tk = pair(rand(k_shape, seed=seed + 2))
    v, tv = pair(rand(v_shape, seed=seed + 3))
    out, attn = F.scaled_dot_product_attention(q, k, v, mask=mask, fill_value=fill)
    tout, tattn = reference(tq, tk, tv, mask, fill)
    assert out.shape == tuple(tout.shape) and attn.shape == tuple(tattn.shape)
    assert_close(attn, tattn, rtol=1e-5, atol=1e-6, equal_nan=True, what="attn")
    assert_close(out, tout, rtol=1e-5, atol=1e-6, equal_nan=True, what="out")
    g_out, g_attn = upstream(tout.shape, seed + 4), upstream(tattn.shape, seed + 5)
    loss = (out * ct.tensor(g_out)).sum() + (attn * ct.tensor(g_attn)).sum()
    tloss = (tout * torch.from_numpy(g_out)).sum() + (tattn * torch.from_numpy(g_attn)).sum()
    loss.backward()
    tloss.backward()
    for name, ours, theirs in (("q", q, tq), ("k", k, tk), ("v", v, tv)):
        assert_close(ours.grad, theirs.grad, rtol=1e-5, atol=1e-5, equal_nan=True, what=f"grad {name}")
    return out, attn


SHAPES = [
    ((2, 3, 4), (2, 5, 4), (2, 5, 6)),        # Lq != Lk, d_v != d_k
    ((2, 4, 8), (2, 4, 8), (2, 4, 8)),        # square self-attention
    ((3, 1, 4), (3, 6, 4), (3, 6, 2)),        # one query (decoding step)
    ((2, 5, 4), (2, 1, 4), (2, 1, 3)),        # one key
    ((2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 4)),  # (batch, heads, L, d)
    ((1, 1, 1), (1, 1, 1), (1, 1, 1)),
]


@pytest.mark.parametrize("q_shape,k_shape,v_shape", SHAPES)
def test_attention_without_mask(q_shape, k_shape, v_shape):
    check(q_shape, k_shape, v_shape, None, -1e9)


@pytest.mark.parametrize("fill", [-1e9, float("-inf")])
def test_padding_mask_b_1_lk(fill):
    """(b, 1, Lk) padding mask on 3-D scores; batch item 2 has no real key (fully masked)."""
    mask = padding_mask(3, 5, [5, 2, 0])
    out, attn = check((3, 4, 6), (3, 5, 6), (3, 5, 3), mask, fill)
    a = attn.numpy()
    assert (a[1, :, 2:] == 0).all(), "masked keys get exactly zero weight"
    if fill == -1e9:
        np.testing.assert_allclose(a[2], np.full((4, 5), 0.2, np.float32), rtol=1e-6)  # uniform, as the reference
    else:
        assert np.isnan(a[2]).all() and np.isnan(out.numpy()[2]).all()
        assert np.isfinite(a[:2]).all()


@pytest.mark.parametrize("fill", [-1e9, float("-inf")])
def test_padding_mask_on_heads(fill):
    """(b, 1, 1, Lk) padding mask broadcast over heads and queries of 4-D scores."""
    mask = padding_mask(2, 4, [3, 1])[:, None]  # (2, 1, 1, 4)
    check((2, 3, 5, 4), (2, 3, 4, 4), (2, 3, 4, 2), mask, fill)


@pytest.mark.parametrize("fill", [-1e9, float("-inf")])
def test_causal_and_padding_mask_b_1_lq_lk(fill):
    """(b, 1, Lq, Lk) decoder mask: subsequent positions and padding; batch item 1 has its first
    query row fully masked (its only key there is padding)."""
    L = 4
    causal = np.tril(np.ones((L, L), dtype=bool))
    pad = padding_mask(2, L, [4, 2])  # (2, 1, L)
    mask = (pad & causal[None])[:, None]  # (2, 1, L, L)
    mask[1, 0, 0, :] = False
    out, attn = check((2, 2, L, 8), (2, 2, L, 8), (2, 2, L, 8), mask, fill)
    upper = np.triu_indices(L, 1)
    assert (attn.numpy()[0][:, upper[0], upper[1]] == 0).all(), "no weight on subsequent positions"


@pytest.mark.parametrize("mask_shape", [(3, 1, 5), (3, 4, 5), (1, 5), (4, 5)])
def test_random_masks_broadcast(mask_shape):
    """Any boolean mask that broadcasts to (b, Lq, Lk) works; rows stay partly open here."""
    rng = np.random.default_rng(11)
    mask = rng.random(mask_shape) < 0.6
    mask[..., 0] = True
    check((3, 4, 2), (3, 5, 2), (3, 5, 3), mask, -1e9, seed=20)


def test_attention_grads_only_where_needed():
    """q requires grad, k and v are constants (as a cached encoder output would be)."""
    q, tq = pair(rand((2, 3, 4), seed=30))
    k, tk = pair(rand((2, 5, 4), seed=31), requires_grad=False)
    v, tv = pair(rand((2, 5, 4), seed=32), requires_grad=False)
    out, _ = F.scaled_dot_product_attention(q, k, v)
    tout, _ = reference(tq, tk, tv, None, -1e9)
    g = upstream(tout.shape, 33)
    out.backward(ct.tensor(g))
    tout.backward(torch.from_numpy(g))
    assert k.grad is None and v.grad is None
    assert_close(q.grad, tq.grad, rtol=1e-5, atol=1e-5, what="grad q")


def test_attention_dropout_on_the_weights():
    """dropout_p drops attention weights (kept ones scaled by 1/(1-p)); out = dropped attn @ v and
    the backward uses the same mask: checked against torch given our mask (tolerances as above)."""
    q, tq = pair(rand((2, 6, 4), seed=40))
    k, tk = pair(rand((2, 6, 4), seed=41))
    v, tv = pair(rand((2, 6, 3), seed=42))
    ct.manual_seed(5)
    out, attn = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    _, clean = reference(tq.detach(), tk.detach(), tv.detach(), None, -1e9)
    kept = attn.numpy() != 0
    assert 0.3 < kept.mean() < 0.7
    assert_close(attn.numpy()[kept], 2 * clean.numpy()[kept], rtol=1e-5, atol=1e-6, what="kept weights")
    ct.manual_seed(5)  # the same seed draws the same mask
    _, again = F.scaled_dot_product_attention(q.detach(), k.detach(), v.detach(), dropout_p=0.5)
    np.testing.assert_array_equal(again.numpy(), attn.numpy())
    tout, tattn = reference(tq, tk, tv, None, -1e9)
    tattn = tattn * torch.from_numpy(kept.astype(np.float32)) * 2.0
    tout = tattn @ tv
    assert_close(out, tout, rtol=1e-5, atol=1e-6, what="out with dropout")
    g = upstream(tuple(tout.shape), 43)
    out.backward(ct.tensor(g))
    tout.backward(torch.from_numpy(g))
    for name, ours, theirs in (("q", q, tq), ("k", k, tk), ("v", v, tv)):
        assert_close(ours.grad, theirs.grad, rtol=1e-5, atol=1e-5, what=f"grad {name}")
