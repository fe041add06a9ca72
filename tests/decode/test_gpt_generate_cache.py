"""The GPT's generation with the key/value cache: GPT.generate(..., use_cache=True), the default, and
ctransformer.decode.generate, against the uncached loop (GPT.generate(..., use_cache=False), the GPT
post's generate re-running the whole cropped context for every token) and torch's reference.

The runs are long enough to crop the context (max_seq_len 16; prompts of 5 and of 20 ids; up to 40 new
ids), where the cache is rebuilt from the cropped window at each step (learned absolute positions: a
crop moves every kept token, so no cached key survives it).

Tolerances: GPTCache's step logits vs a full forward of the same window: |d| <= 1e-5 + 1e-5 |x|
(seen ~1e-6); ids identical (top_k=1: the top-2 logit gap is checked to be > 1e-3; sampling: the same
generator state gives the same draws, the uniform draw meeting a cumulative probability that differs
by ~1e-7 at most).
"""
import numpy as np
import pytest
import torch

import ctransformer as ct
from helpers import assert_close
from reference.gpt_reference import greedy
from reference.parity import single_threaded_torch  # noqa: F401 (autouse fixture)
from reference.gpt_pairs import SMALL, make_pair, prompts

LOGIT_TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("flags", [{}, {"no_pos": True}, {"no_res": True}], ids=["default", "no_pos", "no_res"])
@pytest.mark.parametrize("prompt_len,n", [(5, 8), (5, 40), (20, 10)], ids=["fits", "crops", "long-prompt"])
def test_top1_cached_equals_uncached_and_torch(flags, prompt_len, n):
    tm, cm = make_pair(SMALL, sharp=True, **flags)
    idx = prompts(SMALL, 2, prompt_len)
    expected, margins = greedy(tm, torch.from_numpy(idx), n)
    assert min(margins) > 1e-3, "near-tie in the reference: the comparison would be fragile"
    cached = cm.generate(idx, n, top_k=1)
    uncached = cm.generate(idx, n, top_k=1, use_cache=False)
    np.testing.assert_array_equal(cached, uncached)
    np.testing.assert_array_equal(cached, expected.numpy())
    np.testing.assert_array_equal(ct.decode.generate(cm, idx, n, top_k=1), cached)


@pytest.mark.parametrize("temperature,top_k", [(1.0, None), (0.8, 5), (1.5, 2)])
def test_seeded_sampling_cached_equals_uncached(temperature, top_k):
    _, cm = make_pair(SMALL)   # the GPT's N(0, 0.02) init: flat distributions, varied samples
    idx = prompts(SMALL, 3, 4)
    ct.manual_seed(77)
    cached = cm.generate(idx, 40, temperature=temperature, top_k=top_k)
    state_after_cached = ct.get_rng_state()
    ct.manual_seed(77)
    uncached = cm.generate(idx, 40, temperature=temperature, top_k=top_k, use_cache=False)
    np.testing.assert_array_equal(cached, uncached)
    assert ct.get_rng_state() == state_after_cached, "both draw the same number of times"
    assert len(np.unique(cached[:, 4:])) > 5


def test_greedy_takes_one_draw_a_token_as_sampling_does():
    """top_k=1 finds its token without the general selection but still takes that path's one draw a token:
    the generator stands where sampling as many tokens leaves it, so what is drawn after is the same. A
    temperature keeps the order (the margins are > 1e-3, far from a tie made by the division's rounding)."""
    tm, cm = make_pair(SMALL, sharp=True)
    idx = prompts(SMALL, 2, 5)
    expected, margins = greedy(tm, torch.from_numpy(idx), 12)
    assert min(margins) > 1e-3, "near-tie in the reference: the comparison would be fragile"
    ct.manual_seed(5)
    cm.generate(idx, 12, top_k=2)
    after_sampling = ct.get_rng_state()
    for temperature in (1.0, 0.5):
        ct.manual_seed(5)
        np.testing.assert_array_equal(cm.generate(idx, 12, temperature=temperature, top_k=1), expected.numpy())
        assert ct.get_rng_state() == after_sampling, f"temperature {temperature}"


def test_greedy_draws_among_logits_tied_for_the_largest():
    """Every weight zero: every logit is 0, all tie for the largest, and top_k=1 draws among all of them,
    the same draws as top_k=None (the seed's top-k keeps ties at the k-th)."""
    _, cm = make_pair(SMALL)
    cm.load_state_dict({name: np.zeros_like(value) for name, value in cm.state_dict().items()})
    idx = prompts(SMALL, 2, 3)
    ct.manual_seed(11)
    top1 = cm.generate(idx, 30, top_k=1)
    ct.manual_seed(11)
    np.testing.assert_array_equal(top1, cm.generate(idx, 30))
    assert len(np.unique(top1[:, 3:])) > 5, "drawn among the tied, not the first of them"


def test_one_sequence_is_squeezed_as_the_seed_and_decode_generate_is_not():
    _, cm = make_pair(SMALL, sharp=True)
    idx = prompts(SMALL, 1, 3)
    assert cm.generate(idx, 4, top_k=1).shape == (7,)
    assert ct.decode.generate(cm, idx, 4, top_k=1).shape == (1, 7)
    assert ct.decode.generate(cm, idx, 0).shape == (1, 3)


def test_cache_step_logits_equal_full_forward_across_crops():
    """GPTCache fed as generate feeds it (the window, then one id per step while it fits, then a rebuilt
    window per step): each step's logits equal the full forward of the cropped context."""
    _, cm = make_pair(SMALL, sharp=True)
    C = SMALL["max_seq_len"]
    ids = prompts(SMALL, 2, 30, seed=9)       # a fixed stream of 30 ids per row
    cache = ct.decode.GPTCache(cm)
    for T in range(3, 30):                    # predicting id T from ids[:, :T]
        if 0 < cache.length < C:
            logits = cache.step(ids[:, T - 1:T]).numpy()
        else:
            cache.reset()
            logits = cache.step(ids[:, max(0, T - C):T]).numpy()
        assert cache.length == min(T, C)
        window = ids[:, max(0, T - C):T]
        expected = cm(window)[0].numpy()[:, -1]
        assert_close(logits, expected, **LOGIT_TOL, what=f"step predicting id {T}")


def test_reserved_room_is_made_once_and_changes_no_logit():
    """reserve(n): the caches take n positions of room at the first step and after a reset (generate reserves its
    prompt and new tokens, capped at max_seq_len), so they never grow by copying within it; the logits are the
    unreserved cache's, bit for bit (the same arithmetic on the same keys and values). Without it the room doubles
    from the first step's, at least 16 positions."""
    config = dict(SMALL, max_seq_len=64)
    _, cm = make_pair(config)
    ids = prompts(config, 2, 48, seed=4)
    grown, reserved = ct.decode.GPTCache(cm), ct.decode.GPTCache(cm)
    reserved.reserve(40)
    assert reserved.capacity == grown.capacity == 0        # nothing made before the first step
    rooms = set()
    for t in range(3, 41):
        step = ids[:, :3] if t == 3 else ids[:, t - 1:t]
        np.testing.assert_array_equal(grown.step(step).numpy(), reserved.step(step).numpy())
        rooms.add(reserved.capacity)
    assert reserved.length == grown.length == 40
    assert rooms == {40}                                    # made once, at the first step
    assert grown.capacity == 64                             # 16, 32, 64: grown twice by copying
    reserved.reset()
    reserved.step(ids[:, :2])
    assert reserved.capacity == 40                          # the reservation outlives a reset
    reserved.reserve(10**9)
    reserved.reset()
    reserved.step(ids[:, :2])
    assert reserved.capacity == 64                          # never more than max_seq_len
    with pytest.raises(ValueError, match="GPTCache.reserve: positions"):
        reserved.reserve(-1)


def test_cache_checks_its_input():
    _, cm = make_pair(SMALL)
    cache = ct.decode.GPTCache(cm)
    cache.step(prompts(SMALL, 2, 10))
    with pytest.raises(ValueError, match="max_seq_len"):
        cache.step(prompts(SMALL, 2, 7))
    with pytest.raises(ValueError, match="rows"):
        cache.step(prompts(SMALL, 3, 1))
    with pytest.raises(IndexError, match="outside the vocabulary"):
        cache.step(np.full((2, 1), SMALL["vocab_size"]))


def test_generate_records_no_graph():
    _, cm = make_pair(SMALL)
    ct.decode.generate(cm, prompts(SMALL, 1, 3), 20)
    assert ct.is_grad_enabled()
    assert all(p.grad is None for p in cm.parameters())


@pytest.mark.parametrize("use_cache", [True, False])
def test_bad_arguments_name_them(use_cache):
    _, cm = make_pair(SMALL)
    idx = prompts(SMALL, 1, 3)
    with pytest.raises(IndexError, match="idx holds token id 50"):
        ct.decode.generate(cm, np.full((1, 2), 50), 3, use_cache=use_cache)
    with pytest.raises(ValueError, match="temperature"):
        ct.decode.generate(cm, idx, 3, temperature=0.0, use_cache=use_cache)
    with pytest.raises(ValueError, match="top_k"):
        ct.decode.generate(cm, idx, 3, top_k=0, use_cache=use_cache)
    with pytest.raises(ValueError, match="max_new_tokens must be at least 0"):
        ct.decode.generate(cm, idx, -1, use_cache=use_cache)
    with pytest.raises(ValueError, match="idx must have shape"):
        ct.decode.generate(cm, idx[0], 3, use_cache=use_cache)
    with pytest.raises(ValueError, match="max_new_tokens must be >= 0"):
        cm.generate(idx, -1, use_cache=use_cache)
