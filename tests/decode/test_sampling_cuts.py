"""Which ids sampling draws among: top_k keeps every logit at or above the k-th largest (ties at the k-th included,
as the seed's top-k), top_p keeps the nucleus (in order of rising probability, ties the higher id first, ids are
dropped while the mass dropped is at most 1 - top_p; never the last).

The model's final norm has weight 0 and bias e_0, so every step's logits are the head's first column whatever the
context, and exactly (each dot product has one nonzero term, in any summation order, at any kernel level). The kept
set is then known: every drawn id must be in it and, over thousands of draws, every kept id drawn, each as often
as its probability says (within 5 binomial standard deviations; the generator is seeded, so the counts are fixed).
Temperatures 1 and 0.5 divide exactly, so the cut compares the very values set here. Every level of the SIMD loops
(the weights' exponentials are one).
"""
import numpy as np
import pytest

import ctransformer as ct
from ctransformer._core.serve import SequenceOptions
from kernel_levels import every_level
from waiting import HANG, wait_until

at_every_level = every_level("loops")

VOCAB = 400          # top_k up to VOCAB / 16 keeps the k largest in a heap, larger k selects in a copy


def constant_logits_model(logits):
    model = ct.nn.GPT(vocab_size=VOCAB, max_seq_len=64, n_layers=1, d_model=16, n_head=2, d_inner=32)
    state = model.state_dict()
    head = np.random.default_rng(0).normal(size=state["language_model_head.weight"].shape).astype(np.float32)
    head[:, 0] = logits
    state["language_model_head.weight"] = head
    state["norm.weight"] = np.zeros(16, np.float32)
    state["norm.bias"] = np.eye(16, dtype=np.float32)[0]
    model.load_state_dict(state)
    return model


def tail(rng):
    """Logits far below the ones a test sets: never near a cut."""
    return rng.uniform(-8.0, -6.0, VOCAB).astype(np.float32)


def check_draws(drawn, kept, logits, temperature):
    drawn = np.asarray(drawn).ravel()
    outside = set(np.unique(drawn)) - set(kept)
    assert not outside, f"drew ids outside the kept set: {sorted(outside)}"
    p = np.exp((logits[kept].astype(np.float64) - logits[kept].max()) / temperature)
    p /= p.sum()
    counts = np.array([(drawn == i).sum() for i in kept])
    assert (counts > 0).all(), f"kept ids never drawn: {np.array(kept)[counts == 0]}"
    expected = p * drawn.size
    assert (np.abs(counts - expected) <= 5 * np.sqrt(expected * (1 - p)) + 1).all(), (counts, expected)


@pytest.mark.parametrize("k", [5, 100], ids=["heap", "selection"])
@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_top_k_keeps_the_k_largest_and_every_tie_at_the_kth(k, temperature):
    rng = np.random.default_rng(1)
    logits = tail(rng)
    order = rng.permutation(VOCAB)
    # k - 1 distinct values above the cut, then 4 ids tied at the k-th, then ids one float32 step below it.
    above = np.linspace(1.0, 0.6, k - 1, dtype=np.float32) if k > 5 else np.float32([2.0, 1.75, 1.5, 1.25])
    cut = np.float32(0.5)
    logits[order[:k - 1]] = above
    logits[order[k - 1:k + 3]] = cut
    logits[order[k + 3:k + 6]] = np.nextafter(cut, np.float32(-np.inf))
    model = constant_logits_model(logits)
    kept = sorted(order[:k + 3])
    ct.manual_seed(3)
    out = ct.decode.generate(model, np.ones((16, 2), np.int64), 200, temperature=temperature, top_k=k)
    check_draws(out[:, 2:], kept, logits, temperature)


def nucleus_draws(model, top_p, requests=16, tokens=150):
    engine = ct._core.serve.Engine(max_queue=64, max_rows=8, max_batch_tokens=256)
    engine.add_model("gpt", model)
    ids = {}
    for seed in range(requests):
        ids[engine.submit("gpt", [1, 2], SequenceOptions(max_len=2 + tokens, temperature=1.0, top_p=top_p,
                                                          seed=seed))] = None

    def collect():
        for event in engine.poll(0.05):
            assert event.kind in ("token", "finished"), event.message
            if event.kind == "finished":
                ids[event.request] = event.ids
        return all(v is not None for v in ids.values())

    try:
        wait_until(collect, "every sampled request's end", HANG)
    finally:
        engine.stop()
    return np.concatenate([np.asarray(v) for v in ids.values()])


def test_top_p_drops_the_least_likely_and_of_two_tied_the_higher_id_first():
    """Two ids tie at the nucleus's edge: the higher one is dropped, the lower kept (top_p placed half way
    between the mass dropped with the higher alone and with both, far from every float rounding)."""
    rng = np.random.default_rng(2)
    logits = tail(rng)
    order = rng.permutation(VOCAB)
    top = order[:6]
    logits[top[:4]] = [3.0, 2.5, 2.0, 1.5]
    low, high = sorted(top[4:])
    logits[[low, high]] = 1.0
    p = np.exp(logits.astype(np.float64) - logits.max())
    total = p.sum()
    rest = p.sum() - p[top].sum()            # the tail, dropped first
    dropped_with_high = (rest + p[high]) / total
    dropped_with_both = (rest + p[high] + p[low]) / total
    top_p = 1.0 - (dropped_with_high + dropped_with_both) / 2
    assert min(dropped_with_both - (1 - top_p), (1 - top_p) - dropped_with_high) > 1e-3
    drawn = nucleus_draws(constant_logits_model(logits), float(top_p))
    kept = sorted(list(top[:4]) + [low])
    check_draws(drawn, kept, logits, 1.0)
