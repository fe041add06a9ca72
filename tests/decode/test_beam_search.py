"""Beam search with GNMT's length penalty: ctransformer.decode.beam_search.

score(y) = log P(y | src) / ((5 + |y|) / 6) ** alpha, |y| counting the tokens after start_symbol
(end_symbol included). What is proved:
- beam_size=1 is greedy decoding stopped at end_symbol (seed 000 padded batch; seed 003 preset);
- cached and uncached searches return the same hypotheses and scores;
- on a tiny target vocabulary (5 ids, max_len 5: all 341 possible outputs), a beam wide enough to
  keep every hypothesis finds the brute-force optimum, and its 5-best list is the brute-force top 5;
  brute force scores each sequence by teacher-forcing it through the torch reference (seed 000's
  code, same state dict) in float64 log-softmax;
- narrow beams (2, 3, 4) score at least as well as greedy's output on those models (not a theorem of
  beam search in general, but what it must do in these cases, where it beats greedy by up to 3.5);
- every returned score is the score of the returned sequence, recomputed by teacher forcing in torch;
- a batch is searched as its sources one by one.

Tolerances: scores |d| <= 2e-5 (log P sums <= 15 float32 log-softmax terms; seen <= 5e-6);
ids identical where the competing scores are more than 1e-4 apart.
"""
import itertools

import numpy as np
import pytest
import torch

import ctransformer as ct
from reference import seed000 as R0
from reference import seed003 as R3
from reference.parity import ct_to_torch, single_threaded_torch  # noqa: F401 (autouse fixture)
from test_decode import PAD, SMALL, START, VOCAB, seed000_batch, seed000_model, seed003_batch, seed003_model, sharpen

SCORE_TOL = 2e-5


def lp(length, alpha):
    return ((5 + length) / 6) ** alpha


def cut(row, end):
    """A padded output row up to and including its first end symbol (after the start)."""
    hits = np.flatnonzero(row[1:] == end)
    return tuple(int(t) for t in (row[:hits[0] + 2] if len(hits) else row))


def torch_log_probs(ref, src_row, seqs, scale_prj=False):
    """{sequence: log P(sequence[1:] | src_row)} by teacher forcing through seed 000's torch model:
    the decoder under the no-peek mask (as decoding sees it), log_softmax in float64."""
    out = {}
    with torch.no_grad():
        src = torch.from_numpy(np.asarray(src_row)[None])
        src_mask = R0.get_pad_mask(src, ref.src_pad_idx)
        memory, *_ = ref.encoder(src, src_mask)
        by_len = {}
        for q in seqs:
            by_len.setdefault(len(q), []).append(tuple(q))
        for group in by_len.values():
            ids = torch.tensor(group)
            trg = ids[:, :-1]
            dec, *_ = ref.decoder(trg, R0.get_subsequent_mask(trg), memory.expand(len(group), -1, -1), src_mask)
            logits = ref.trg_word_prj(dec)
            if ref.scale_prj:
                logits *= ref.d_model ** -0.5
            logp = torch.log_softmax(logits.double(), -1).gather(2, ids[:, 1:, None])[..., 0].sum(1)
            out.update(zip(group, logp.tolist()))
    return out


# ---- beam_size = 1 is greedy ----------------------------------------------------------------------------
@pytest.mark.parametrize("use_cache", [True, False])
def test_beam_size_one_is_greedy_seed000(use_cache):
    model = seed000_model("untied", seed=6)
    src, src_mask = seed000_batch(seed=6)
    for end in (5, 12, 40):   # ends in some rows, in every row, in none
        greedy = ct.decode.greedy_decode(model, src, src_mask, 20, START, end)
        ids, scores = ct.decode.beam_search(model, src, src_mask, 20, START, end, beam_size=1, use_cache=use_cache)
        np.testing.assert_array_equal(ids, greedy)
        assert scores.shape == (len(src),) and scores.dtype == np.float64


def test_beam_size_one_is_greedy_seed003():
    model = seed003_model(seed=5)
    x, src_mask = seed003_batch(b=4, seed=5)
    plain = ct.decode.greedy_decode(model, x, src_mask, 50, 0)
    end = int(plain[1, 7])   # a token row 1 produces, so at least one row ends early
    greedy = ct.decode.greedy_decode(model, x, src_mask, 50, 0, end)
    ids, _ = ct.decode.beam_search(model, x, src_mask, 50, 0, end, beam_size=1)
    np.testing.assert_array_equal(ids, greedy)
    assert (ids[1, 8:] == R3.PAD).all()


# ---- cached == uncached; batch == one by one ------------------------------------------------------------
def test_cached_beam_equals_uncached():
    model = seed000_model("untied", seed=2)
    src, src_mask = seed000_batch(seed=2)
    a_ids, a_scores = ct.decode.beam_search(model, src, src_mask, 14, START, 7, beam_size=4, n_best=4)
    b_ids, b_scores = ct.decode.beam_search(model, src, src_mask, 14, START, 7, beam_size=4, n_best=4,
                                            use_cache=False)
    assert a_ids.shape == (4, 4, 14) and a_scores.shape == (4, 4)
    np.testing.assert_array_equal(a_ids, b_ids)
    np.testing.assert_allclose(a_scores, b_scores, rtol=0, atol=SCORE_TOL)


def test_seed003_cached_beam_equals_uncached():
    model = seed003_model(seed=6)
    x, src_mask = seed003_batch(b=2, seed=6)
    a = ct.decode.beam_search(model, x, src_mask, 30, 0, 1, beam_size=3, n_best=3)
    b = ct.decode.beam_search(model, x, src_mask, 30, 0, 1, beam_size=3, n_best=3, use_cache=False)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_allclose(a[1], b[1], rtol=0, atol=SCORE_TOL)


def test_batch_is_searched_source_by_source():
    model = seed000_model("untied", seed=2)
    src, src_mask = seed000_batch(seed=2)
    ids, scores = ct.decode.beam_search(model, src, src_mask, 14, START, 7, beam_size=3, alpha=1.0, n_best=2)
    for r in range(len(src)):
        one_ids, one_scores = ct.decode.beam_search(model, src[r:r + 1], src_mask[r:r + 1], 14, START, 7,
                                                    beam_size=3, alpha=1.0, n_best=2)
        np.testing.assert_array_equal(one_ids[0], ids[r])
        np.testing.assert_allclose(one_scores[0], scores[r], rtol=0, atol=SCORE_TOL)


# ---- against brute force on a tiny vocabulary -------------------------------------------------------------
TINY_V, TINY_PAD, TINY_START, TINY_END, TINY_MAX_LEN = 5, 0, 1, 2, 5


def tiny_model(seed):
    """Source vocabulary 9, target vocabulary 5 (0 pad, 1 start, 2 end, 3 and 4 words), untied."""
    options = dict(trg_emb_prj_weight_sharing=False, emb_src_trg_weight_sharing=False)
    ct.manual_seed(seed)
    model = sharpen(ct.nn.Transformer(9, TINY_V, TINY_PAD, TINY_PAD, **SMALL, **options), seed).eval()
    ref = R0.Transformer(9, TINY_V, TINY_PAD, TINY_PAD, **SMALL, **options).eval()
    ct_to_torch(model, ref)
    rng = np.random.default_rng(seed)
    src = rng.integers(1, 9, (3, 7))
    src[1, 5:] = TINY_PAD
    return model, ref, src, ct.nn.get_pad_mask(src, TINY_PAD)


def every_output():
    """Every sequence decoding can return: start, then up to max_len - 1 tokens, stopping at the first
    end; 1 + 4 + 16 + 64 ending with end, 256 reaching max_len without it: 341."""
    words = [w for w in range(TINY_V) if w != TINY_END]
    out = []
    for n in range(1, TINY_MAX_LEN):
        out += [(TINY_START, *body, TINY_END) for body in itertools.product(words, repeat=n - 1)]
    out += [(TINY_START, *body) for body in itertools.product(words, repeat=TINY_MAX_LEN - 1)]
    return out


@pytest.mark.parametrize("seed", [0, 2])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
def test_wide_beam_finds_the_brute_force_optimum(seed, alpha):
    model, ref, src, src_mask = tiny_model(seed)
    seqs = every_output()
    assert len(seqs) == 341
    # 64 live hypotheses x 5 tokens = 320 candidates at the last step: a beam of 400 prunes nothing.
    ids, scores = ct.decode.beam_search(model, src, src_mask, TINY_MAX_LEN, TINY_START, TINY_END,
                                        beam_size=400, alpha=alpha, n_best=5)
    for r in range(len(src)):
        log_probs = torch_log_probs(ref, src[r], seqs)
        brute = sorted(((lp_ / lp(len(q) - 1, alpha), q) for q, lp_ in log_probs.items()), reverse=True)
        np.testing.assert_allclose(scores[r], [s for s, _ in brute[:5]], rtol=0, atol=SCORE_TOL)
        for j in range(5):
            apart = all(abs(brute[j][0] - brute[i][0]) > 1e-4 for i in (j - 1, j + 1) if 0 <= i < len(brute))
            if apart:
                assert cut(ids[r, j], TINY_END) == brute[j][1], f"row {r}, {j}-th best"


@pytest.mark.parametrize("seed", [0, 2])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
def test_narrow_beams_score_at_least_greedy(seed, alpha):
    model, ref, src, src_mask = tiny_model(seed)
    greedy = ct.decode.greedy_decode(model, src, src_mask, TINY_MAX_LEN, TINY_START, TINY_END)
    best = ct.decode.beam_search(model, src, src_mask, TINY_MAX_LEN, TINY_START, TINY_END, beam_size=400,
                                 alpha=alpha)[1]
    for beam_size in (2, 3, 4):
        ids, scores = ct.decode.beam_search(model, src, src_mask, TINY_MAX_LEN, TINY_START, TINY_END,
                                            beam_size=beam_size, alpha=alpha)
        for r in range(len(src)):
            g = cut(greedy[r], TINY_END)
            greedy_score = torch_log_probs(ref, src[r], [g])[g] / lp(len(g) - 1, alpha)
            assert greedy_score - SCORE_TOL <= scores[r] <= best[r] + SCORE_TOL


def test_the_beam_beats_greedy_somewhere():
    """The cases above are not all trivial: on seed 0 (alpha 0) beam search finds better outputs than greedy."""
    model, ref, src, src_mask = tiny_model(0)
    greedy = ct.decode.greedy_decode(model, src, src_mask, TINY_MAX_LEN, TINY_START, TINY_END)
    ids, scores = ct.decode.beam_search(model, src, src_mask, TINY_MAX_LEN, TINY_START, TINY_END, beam_size=3,
                                        alpha=0.0)
    gains = [scores[r] - torch_log_probs(ref, src[r], [cut(greedy[r], TINY_END)])[cut(greedy[r], TINY_END)]
             for r in range(len(src))]
    assert max(gains) > 0.5


# ---- the scores are those of the returned sequences --------------------------------------------------------
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_scores_match_teacher_forcing(alpha):
    model = seed000_model("prj-tied", seed=6)
    ref = R0.Transformer(VOCAB, VOCAB, PAD, PAD, **SMALL).eval()
    ct_to_torch(model, ref)
    src, src_mask = seed000_batch(seed=6)
    end = 5
    ids, scores = ct.decode.beam_search(model, src, src_mask, 16, START, end, beam_size=4, alpha=alpha, n_best=4)
    assert np.all(np.diff(scores, axis=1) <= 0), "n-best lists are sorted, best first"
    for r in range(len(src)):
        hyps = [cut(ids[r, j], end) for j in range(4)]
        assert len(set(hyps)) == 4, "n-best hypotheses are distinct"
        log_probs = torch_log_probs(ref, src[r], hyps)
        for j, h in enumerate(hyps):
            assert (ids[r, j, len(h):] == PAD).all()
            assert scores[r, j] == pytest.approx(log_probs[h] / lp(len(h) - 1, alpha), abs=SCORE_TOL)


def test_length_penalty():
    for n in (0, 1, 7, 49):
        for alpha in (0.0, 0.6, 1.0):
            assert ct.decode.length_penalty(n, alpha) == pytest.approx(((5 + n) / 6) ** alpha, rel=1e-15)


def test_max_len_one():
    model = seed000_model("prj-tied")
    src, src_mask = seed000_batch()
    ids, scores = ct.decode.beam_search(model, src, src_mask, 1, START, 5)
    np.testing.assert_array_equal(ids, np.full((4, 1), START))
    np.testing.assert_array_equal(scores, np.zeros(4))


BAD = [
    (dict(beam_size=0), ValueError, "beam_size must be at least 1"),
    (dict(beam_size=-2), ValueError, "beam_size must be at least 1"),
    (dict(n_best=0), ValueError, "n_best must be at least 1"),
    (dict(n_best=5), ValueError, "n_best must be between 1 and beam_size = 4"),
    (dict(alpha=-0.5), ValueError, "alpha must be a finite number >= 0"),
    (dict(alpha=float("nan")), ValueError, "alpha must be a finite number >= 0"),
    (dict(end_symbol=VOCAB), IndexError, "end_symbol = 41"),
    (dict(end_symbol=None), TypeError, "end_symbol"),
    (dict(max_len=0), ValueError, "beam_search: max_len must be at least 1"),
]


@pytest.mark.parametrize("change,error,message", BAD, ids=[str(b[0]) for b in BAD])
def test_bad_arguments_name_them(change, error, message):
    model = seed000_model("prj-tied")
    src, src_mask = seed000_batch()
    args = dict(max_len=5, end_symbol=3, beam_size=4, alpha=0.6, n_best=None)
    args.update(change)
    with pytest.raises(error, match=message):
        ct.decode.beam_search(model, src, src_mask, args["max_len"], START, args["end_symbol"],
                              beam_size=args["beam_size"], alpha=args["alpha"], n_best=args["n_best"])
