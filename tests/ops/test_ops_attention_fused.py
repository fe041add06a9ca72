"""multi_head_attention (heads interleaved in the last dimension, as the projections produce them)
against torch with the heads split, as the post-norm Transformer's MultiHeadAttention does it:

    q (b, Lq, h*d) -> view (b, Lq, h, d) -> transpose (b, h, Lq, d), the same for k and v
    attn = dropout(softmax(masked_fill(scale * q @ k^T, mask == 0, fill)))     (b, h, Lq, Lk)
    out = (attn @ v).transpose(1, 2).reshape(b, Lq, h*d_v)

Both outputs and the gradients of q, k and v through a random weighting of both outputs.
Tolerances as tests/ops/test_ops_attention.py: rtol 1e-5, atol 1e-6 for out and attn, gradients
rtol 1e-5, atol 1e-5 (chained float32 products summed in another order than torch's).
"""
import numpy as np
import pytest
import torch

import ctransformer as ct
from helpers import assert_close, pair, rand
from upstream import upstream
from kernel_levels import every_level

# Every test at each level's attention's rows (kernels/simd/attention.cpp).
at_every_level = every_level("loops")

F = ct.functional


def reference(q, k, v, h, scale, mask=None, fill=-1e9, causal=False, keep=None, keep_scale=1.0):
    b, lq, _ = q.shape
    lk = k.shape[1]
    split = lambda x: x.reshape(x.shape[0], x.shape[1], h, -1).transpose(1, 2)
    scores = (split(q) @ split(k).transpose(-2, -1)) * scale
    if mask is not None:
        scores = scores.masked_fill(torch.from_numpy(np.asarray(mask)) == 0, fill)
    if causal:
        future = torch.triu(torch.ones(lq, lk, dtype=torch.bool), diagonal=1 + lk - lq)
        scores = scores.masked_fill(future, fill)
    attn = torch.softmax(scores, dim=-1)
    if keep is not None:
        attn = attn * torch.from_numpy(keep.astype(np.float32)) * keep_scale
    out = (attn @ split(v)).transpose(1, 2).reshape(b, lq, -1)
    return out, attn


def check(b, lq, lk, h, dk, dv, mask=None, fill=-1e9, causal=False, seed=0, same_qkv=False):
    q, tq = pair(rand((b, lq, h * dk), seed=seed + 1))
    if same_qkv:
        k, tk, v, tv = q, tq, q, tq
    else:
        k, tk = pair(rand((b, lk, h * dk), seed=seed + 2))
        v, tv = pair(rand((b, lk, h * dv), seed=seed + 3))
    scale = 1.0 / np.sqrt(dk)
    out, attn = F.multi_head_attention(q, k, v, h, mask=mask, fill_value=fill, causal=causal)
    tout, tattn = reference(tq, tk, tv, h, scale, mask, fill, causal)
    assert out.shape == tuple(tout.shape) and attn.shape == tuple(tattn.shape)
    assert_close(attn, tattn, rtol=1e-5, atol=1e-6, equal_nan=True, what="attn")
    assert_close(out, tout, rtol=1e-5, atol=1e-6, equal_nan=True, what="out")
    g_out, g_attn = upstream(tuple(tout.shape), seed + 4), upstream(tuple(tattn.shape), seed + 5)
    loss = (out * ct.tensor(g_out)).sum() + (attn * ct.tensor(g_attn)).sum()
    tloss = (tout * torch.from_numpy(g_out)).sum() + (tattn * torch.from_numpy(g_attn)).sum()
    loss.backward()
    tloss.backward()
    names = (("q", q, tq),) if same_qkv else (("q", q, tq), ("k", k, tk), ("v", v, tv))
    for name, ours, theirs in names:
        assert_close(ours.grad, theirs.grad, rtol=1e-5, atol=1e-5, equal_nan=True, what=f"grad {name}")


@pytest.mark.parametrize("b,lq,lk,h,dk,dv", [(2, 3, 5, 2, 4, 6), (3, 7, 7, 4, 8, 8), (1, 1, 6, 3, 2, 5), (2, 9, 1, 1, 3, 3)])
def test_unmasked(b, lq, lk, h, dk, dv):
    check(b, lq, lk, h, dk, dv)


@pytest.mark.parametrize("fill", [-1e9, float("-inf")])
def test_padding_mask_b_1_1_lk(fill):
    """The post-norm Transformer's src mask unsqueezed over the heads; batch item 1 keeps one key, item 2 none."""
    mask = (np.arange(6)[None, None, None, :] < np.array([6, 1, 0])[:, None, None, None])
    check(3, 4, 6, 2, 4, 4, mask=mask, fill=fill, seed=10)


def test_target_mask_b_1_lq_lk_with_causal():
    """pad AND no-peek mask (b, 1, Lq, Lk) as the post-norm Transformer's decoder self-attention, plus causal."""
    rng = np.random.default_rng(3)
    mask = rng.random((2, 1, 5, 5)) > 0.3
    mask[:, :, :, 0] = True
    check(2, 5, 5, 4, 3, 3, mask=mask, causal=True, seed=20)


@pytest.mark.parametrize("lq,lk", [(6, 6), (2, 6)])
def test_causal_minus_inf_as_gpt(lq, lk):
    """As in the GPT: -inf above the diagonal; with Lq < Lk the queries are the last Lq positions."""
    check(2, lq, lk, 4, 4, 4, fill=float("-inf"), causal=True, seed=30)


def test_one_tensor_as_q_k_and_v():
    """The gradient of a tensor used as q, k and v is the sum of the three paths."""
    check(2, 5, 5, 2, 3, 3, same_qkv=True, seed=40)


def test_dropout_uses_one_mask_forward_and_backward():
    q, tq = pair(rand((2, 6, 8), seed=50))
    k, tk = pair(rand((2, 6, 8), seed=51))
    v, tv = pair(rand((2, 6, 4), seed=52))
    ct.manual_seed(7)
    out, attn = F.multi_head_attention(q, k, v, 2, dropout_p=0.5)
    _, clean = reference(tq.detach(), tk.detach(), tv.detach(), 2, 0.5)
    keep = attn.numpy() != 0
    assert 0.3 < keep.mean() < 0.7
    tout, tattn = reference(tq, tk, tv, 2, 0.5, keep=keep, keep_scale=2.0)
    assert_close(attn, tattn, rtol=1e-5, atol=1e-6, what="attn with dropout")
    assert_close(out, tout, rtol=1e-5, atol=1e-6, what="out with dropout")
    g = upstream(tuple(tout.shape), 53)
    out.backward(ct.tensor(g))
    tout.backward(torch.from_numpy(g))
    for name, ours, theirs in (("q", q, tq), ("k", k, tk), ("v", v, tv)):
        assert_close(ours.grad, theirs.grad, rtol=1e-5, atol=1e-5, what=f"grad {name}")


@pytest.mark.parametrize("causal", [False, True])
def test_kv_length_reads_only_the_held_positions(causal):
    """A decoding cache: k and v with room past kv_length, the room full of 1e30 (any read of it would
    swamp the output), give torch's attention over the first kv_length positions, and q its gradient.
    Tolerances as above."""
    b, lq, lk, room, h, d = 3, 2, 5, 4, 2, 4
    q, tq = pair(rand((b, lq, h * d), seed=61))
    k, v = rand((b, lk, h * d), seed=62), rand((b, lk, h * d), seed=63)
    held = lambda x: np.concatenate([x, np.full((b, room, h * d), 1e30, np.float32)], axis=1)
    mask = np.ones((b, 1, lk), bool)
    mask[0, 0, 1] = mask[2, 0, 4] = False
    out, attn = F.multi_head_attention(q, ct.tensor(held(k)), ct.tensor(held(v)), h, mask=mask[:, None],
                                       causal=causal, kv_length=lk)
    tout, tattn = reference(tq, torch.from_numpy(k), torch.from_numpy(v), h, d ** -0.5, mask[:, None], causal=causal)
    assert attn.shape == (b, h, lq, lk)
    assert_close(attn, tattn, rtol=1e-5, atol=1e-6, what="attn")
    assert_close(out, tout, rtol=1e-5, atol=1e-6, what="out")
    g = upstream(tuple(tout.shape), 64)
    out.backward(ct.tensor(g))
    tout.backward(torch.from_numpy(g))
    assert_close(q.grad, tq.grad, rtol=1e-5, atol=1e-5, what="grad q")


@pytest.mark.parametrize("b,h,d,lk", [(1, 12, 64, 37), (5, 3, 20, 9), (32, 4, 8, 3), (2, 1, 5, 1)],
                         ids=["batch-1-heads-split", "tail-lanes", "many-entries", "one-head-one-key"])
def test_one_query_decoding_reads_all_heads_of_a_row_together(b, h, d, lk):
    """Decoding's shape (one query per entry, ops/attention.cpp's one_query_rows): an entry's heads a row of
    keys at a time, against torch's head by head; d's not a multiple of the lanes take the partial blocks,
    batch 1 splits the heads over the threads. Out, attn and q, k, v's gradients, tolerances as above."""
    check(b, 1, lk, h, d, d, seed=70)


@pytest.mark.parametrize("fill", [-1e9, float("-inf")])
def test_one_query_with_a_padding_mask_and_room_past_kv_length(fill):
    """The translator's cross-attention at a decoding step (a padding mask, entry 2 keeping no key) and a cache
    whose room past kv_length is 1e30 (a read of it would swamp the output). Tolerances as above."""
    b, lk, room, h, d = 3, 7, 3, 4, 12
    q, tq = pair(rand((b, 1, h * d), seed=81))
    k, v = rand((b, lk, h * d), seed=82), rand((b, lk, h * d), seed=83)
    held = lambda x: np.concatenate([x, np.full((b, room, h * d), 1e30, np.float32)], axis=1)
    mask = (np.arange(lk)[None, None, None, :] < np.array([7, 2, 0])[:, None, None, None])
    out, attn = F.multi_head_attention(q, ct.tensor(held(k)), ct.tensor(held(v)), h, mask=mask, fill_value=fill,
                                       kv_length=lk)
    tout, tattn = reference(tq, torch.from_numpy(k), torch.from_numpy(v), h, d ** -0.5, mask, fill)
    assert_close(attn, tattn, rtol=1e-5, atol=1e-6, equal_nan=True, what="attn")
    assert_close(out, tout, rtol=1e-5, atol=1e-6, equal_nan=True, what="out")


def bf16_rounded(x):
    """float32 values rounded to bf16 (to nearest, ties to even) and widened back, as float64."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return r.view(np.float32).astype(np.float64)


def test_one_query_under_autocast_rounds_every_operand_to_bf16():
    """Decoding's shape in an autocast region: q, k, the softmax's weights and v rounded to bf16 as they are read,
    their exact products added in float32 (the emulated kernel's maths, on every CPU). Against float64 of the same
    rounded operands, the weights being the attn returned (the float32 values the product rounded), so no bf16
    rounding edge sits between the two: rtol 1e-5, atol 1e-6 (float32 sums of 16 products and 21 terms). And not
    float32's answer: the rounding happened."""
    b, lk, h, d = 3, 21, 4, 16
    q, k, v = (rand((b, n, h * d), seed=90 + i) for i, n in enumerate((1, lk, lk)))
    with ct.no_grad(), ct.autocast():
        out, attn = F.multi_head_attention(ct.tensor(q), ct.tensor(k), ct.tensor(v), h, causal=True)
    split = lambda x: bf16_rounded(x).reshape(b, -1, h, d).transpose(0, 2, 1, 3)
    scores = split(q) @ split(k).transpose(0, 1, 3, 2) / np.sqrt(d)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    assert_close(attn, weights, rtol=1e-5, atol=1e-6, what="attn")
    expected = (bf16_rounded(attn.numpy()) @ split(v)).transpose(0, 2, 1, 3).reshape(b, 1, h * d)
    assert_close(out, expected, rtol=1e-5, atol=1e-6, what="out")
    with ct.no_grad():
        out32, _ = F.multi_head_attention(ct.tensor(q), ct.tensor(k), ct.tensor(v), h, causal=True)
    assert np.abs(out.numpy() - out32.numpy()).max() > 2.0 ** -12 * np.abs(out32.numpy()).max()


def test_kv_length_bad_values_name_the_problem():
    t = lambda s, grad=False: ct.tensor(rand(s, seed=1), requires_grad=grad)
    with pytest.raises(ValueError, match="kv_length 4 is more than the 3 positions"):
        F.multi_head_attention(t((1, 2, 4)), t((1, 3, 4)), t((1, 3, 4)), 2, kv_length=4)
    with pytest.raises(ValueError, match="kv_length must be at least 1"):
        F.multi_head_attention(t((1, 2, 4)), t((1, 3, 4)), t((1, 3, 4)), 2, kv_length=0)
    with pytest.raises(ValueError, match="take no gradient"):   # the room would get no gradient written
        F.multi_head_attention(t((1, 2, 4)), t((1, 3, 4), True), t((1, 3, 4)), 2, kv_length=2)


def test_bad_shapes_name_the_problem():
    t = lambda s: ct.tensor(rand(s, seed=1))
    with pytest.raises(ValueError, match="n_head"):
        F.multi_head_attention(t((1, 2, 6)), t((1, 2, 6)), t((1, 2, 6)), 4)
    with pytest.raises(ValueError, match="batch"):
        F.multi_head_attention(t((1, 2, 4)), t((2, 2, 4)), t((2, 2, 4)), 2)
    with pytest.raises(ValueError, match="mask"):
        F.multi_head_attention(t((1, 2, 4)), t((1, 3, 4)), t((1, 3, 4)), 2, mask=np.ones((1, 1, 1, 2), bool))
