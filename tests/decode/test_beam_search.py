"""Beam search with GNMT's length penalty: ctransformer.decode.beam_search.

score(y) = log P(y | src) / ((5 + |y|) / 6) ** alpha, |y| counting the tokens after start_symbol
(end_symbol included). What is proved:
- beam_size=1 is greedy decoding stopped at end_symbol (the post-norm Transformer on a padded
  batch; the toy translator's preset);
- cached and uncached searches return the same hypotheses and scores (every source of these searches
  decides nothing within BEAM_MARGIN, so all are compared);
- on a tiny target vocabulary (5 ids, max_len 5: all 341 possible outputs), a beam wide enough to
  keep every hypothesis finds the brute-force optimum, and its 5-best list is the brute-force top 5;
  brute force scores each sequence by teacher-forcing it through the post-norm reference (jadore801120's
  code in torch, same state dict) in float64 log-softmax;
- narrow beams (2, 3, 4) score at least as well as greedy's output on those models (not a theorem of
  beam search in general, but what it must do in these cases, where it beats greedy by up to 3.5);
- every returned score is the score of the returned sequence, recomputed by teacher forcing in torch;
- a batch is searched as its sources one by one (where a source's search decides nothing within BEAM_MARGIN:
  three of the four).

Tolerances: scores |d| <= 2e-5 (log P sums <= 15 float32 log-softmax terms; seen <= 5e-6).
ids are compared only where no legal float32 order can change them (DEVELOPING.md, "Parity tests and knife
edges"): beam_size=1 against greedy along greedy's steps whose top-1/top-2 gap clears test_decode's
GREEDY_MARGIN; two routes of a wider search source by source, where every decision of the source's search (the
pruning boundary at each step, not only the order of the returned beams) clears BEAM_MARGIN, seen by
traced_beam_search; against brute force where the competing scores are more than 1e-4 apart.
"""
import itertools

import numpy as np
import pytest
import torch

import ctransformer as ct
from reference import post_norm as post_ref
from reference import pre_norm as pre_ref
from reference.parity import ct_to_torch, single_threaded_torch  # noqa: F401 (autouse fixture)
from test_decode import (GREEDY_MARGIN, PAD, SMALL, START, VOCAB, assert_same_greedy_ids, post_norm_batch,
                         post_norm_model, pre_norm_batch, pre_norm_model, sharpen)
from kernel_levels import every_level

# Every test at each level's searches, few-rows and packed products (kernels/simd/search.cpp, kernels/fp32/).
at_every_level = every_level("loops")

SCORE_TOL = 2e-5
# Two float32 routes of a beam search (cached or not, a batch or a source alone) keep the same hypotheses where
# every decision clears a gap of BEAM_MARGIN in log P (or score): each step's pruning boundary (the beam_size-th
# against the next candidate), the early stop's test, the order of the final n-best and the next. The candidates'
# log P differ by <= 3.3e-6 between routes (measured, AVX-512 and with OPENBLAS_CORETYPE=Prescott,
# CTRANSFORMER_KERNEL_LEVEL=x86-64; float32 logits summed over up to 30 steps), so the margin is 30x that, and
# asserted on every run to be >= 10x the spread of the routes compared.
BEAM_MARGIN = 1e-4


def lp(length, alpha):
    return ((5 + length) / 6) ** alpha


def cut(row, end):
    """A padded output row up to and including its first end symbol (after the start)."""
    hits = np.flatnonzero(row[1:] == end)
    return tuple(int(t) for t in (row[:hits[0] + 2] if len(hits) else row))


def traced_beam_search(model, src, src_mask, max_len, start, end, beam_size, alpha, n_best, use_cache=True):
    """decode/beam_search.cpp in Python over a StepDecoder (its logits' log-softmax in float64), to see the
    decisions the search takes and how near each was to going the other way. Per source s:
    - hyps[s]: its n_best finished (ids, score), best first;
    - gaps[s]: the smallest gap among its decisions: at each step, between the beam_size-th and the next
      candidate's log P (the pruning boundary); between the n_best-th finished score and the live bound
      where the early stop is tested; between consecutive final scores up to the n_best-th and the next;
    - log_probs[s]: {ids: log P} of every candidate up to each step's pruning boundary.
    The decoder runs under PackedWeights with the rows beam_search.cpp gives it (every source's live
    hypotheses, source by source), so its logits are those of beam_search's own decoder."""
    b = len(src)
    live = [[((start,), 0.0)] for _ in range(b)]
    finished = [[] for _ in range(b)]
    gaps, log_probs = [np.inf] * b, [{} for _ in range(b)]
    with ct.decode.PackedWeights():
        dec = ct.decode.StepDecoder(model, src, src_mask, use_cache=use_cache)
        for t in range(1, max_len):
            last = [ids[-1] for hyps in live for ids, _ in hyps]
            if not last:
                break
            x = dec.step(np.array(last)).numpy().astype(np.float64)
            top = x.max(-1, keepdims=True)
            logp = x - top - np.log(np.exp(x - top).sum(-1, keepdims=True))
            parents, row0 = [], 0
            for s in range(b):
                hyps = live[s]
                candidates = []   # (log P, hypothesis, word); a hypothesis's beam_size + 1 best words hold the
                for j, (ids, lp0) in enumerate(hyps):   # boundary: beam_size of them beat any later word
                    words = np.argsort(-logp[row0 + j], kind="stable")[:beam_size + 1]
                    candidates += [(lp0 + logp[row0 + j, w], j, int(w)) for w in words]
                candidates.sort(key=lambda c: (-c[0], c[1], c[2]))   # ties: earlier hypothesis, smaller id
                k = min(beam_size, len(candidates))
                if len(candidates) > k:
                    gaps[s] = min(gaps[s], candidates[k - 1][0] - candidates[k][0])
                for lp_, j, w in candidates[:k + 1]:
                    log_probs[s][hyps[j][0] + (w,)] = lp_
                nxt = []
                for lp_, j, w in candidates[:k]:
                    ids = hyps[j][0] + (w,)
                    if w == end or t + 1 == max_len:
                        finished[s].append((ids, lp_ / lp(len(ids) - 1, alpha)))
                    else:
                        nxt.append((ids, lp_))
                        parents.append(row0 + j)
                row0 += len(hyps)
                if nxt and len(finished[s]) >= n_best:   # the early stop
                    nth = sorted((score for _, score in finished[s]), reverse=True)[n_best - 1]
                    bound = max(lp_ for _, lp_ in nxt) / lp(max_len - 1, alpha)
                    gaps[s] = min(gaps[s], abs(nth - bound))
                    if nth >= bound:
                        del parents[len(parents) - len(nxt):]
                        nxt = []
                live[s] = nxt
            if parents:
                dec.select(parents)
    hyps = []
    for s in range(b):
        done = sorted(finished[s], key=lambda h: -h[1])   # stable, as beam_search.cpp's
        scores = [score for _, score in done[:n_best + 1]]
        gaps[s] = min([gaps[s]] + [a - c for a, c in zip(scores, scores[1:])])
        hyps.append(done[:n_best])
    return hyps, gaps, log_probs


def padded(hyps, n_best, max_len, pad):
    """traced_beam_search's hypotheses of one source as beam_search returns them: (n_best, max_len) ids, padded,
    and (n_best,) scores, -inf where fewer finished."""
    ids, scores = np.full((n_best, max_len), pad), np.full(n_best, -np.inf)
    for j, (h, score) in enumerate(hyps):
        ids[j, :len(h)], scores[j] = h, score
    return ids, scores


def assert_same_search(trace, other_trace, ids, scores, other_ids, other_scores, pad, at_least, what):
    """beam_search's n-best (ids (b, n_best, max_len), scores) by two float32 routes, with traced_beam_search's
    trace of each route. A source is compared (both routes' ids equal the trace's, scores within SCORE_TOL)
    where every decision of its traced search clears BEAM_MARGIN; a source with a decision within it may
    legally come out otherwise on another CPU and is not. The routes' spread (their traces' log P of the
    same candidates, and each trace against its route's returned scores) must be at most BEAM_MARGIN / 10,
    and at least `at_least` sources compared. Returns the smallest gap of each source."""
    hyps, gaps, log_probs = trace
    spread = 0.0
    for mine, theirs in zip(log_probs, other_trace[2]):
        spread = max([spread] + [abs(mine[q] - theirs[q]) for q in mine.keys() & theirs.keys()])
    compared = 0
    for s_, (best, gap) in enumerate(zip(hyps, gaps)):
        if gap < BEAM_MARGIN:
            continue
        want_ids, want_scores = padded(best, *ids.shape[1:], pad)
        for got_ids, got_scores, route in ((ids, scores, "first"), (other_ids, other_scores, "second")):
            np.testing.assert_array_equal(got_ids[s_], want_ids, err_msg=f"{what}: source {s_}, {route} route")
            finite = np.isfinite(want_scores)
            np.testing.assert_array_equal(np.isfinite(got_scores[s_]), finite)
            spread = max(spread, float(np.abs(got_scores[s_][finite] - want_scores[finite]).max(initial=0.0)))
        np.testing.assert_allclose(scores[s_], other_scores[s_], rtol=0, atol=SCORE_TOL)
        compared += 1
    assert spread <= BEAM_MARGIN / 10, f"{what}: the routes' log P differ by {spread:.3g}"
    assert compared >= at_least, f"{what}: {compared} sources clear BEAM_MARGIN (gaps {gaps})"
    return gaps


def torch_log_probs(ref, src_row, seqs, scale_prj=False):
    """{sequence: log P(sequence[1:] | src_row)} by teacher forcing through the post-norm reference:
    the decoder under the no-peek mask (as decoding sees it), log_softmax in float64."""
    out = {}
    with torch.no_grad():
        src = torch.from_numpy(np.asarray(src_row)[None])
        src_mask = post_ref.get_pad_mask(src, ref.src_pad_idx)
        memory, *_ = ref.encoder(src, src_mask)
        by_len = {}
        for q in seqs:
            by_len.setdefault(len(q), []).append(tuple(q))
        for group in by_len.values():
            ids = torch.tensor(group)
            trg = ids[:, :-1]
            dec, *_ = ref.decoder(trg, post_ref.get_subsequent_mask(trg), memory.expand(len(group), -1, -1), src_mask)
            logits = ref.trg_word_prj(dec)
            if ref.scale_prj:
                logits *= ref.d_model ** -0.5
            logp = torch.log_softmax(logits.double(), -1).gather(2, ids[:, 1:, None])[..., 0].sum(1)
            out.update(zip(group, logp.tolist()))
    return out


# ---- beam_size = 1 is greedy ----------------------------------------------------------------------------
def assert_beam_one_is_greedy(model, src, src_mask, max_len, start, end, use_cache=True, alpha=0.6):
    """beam_size=1 keeps each step's best word (ties: the smaller id), greedy's first maximum; at width 1 the
    pruning boundary is greedy's top-1/top-2 gap. The ids are compared along the cached greedy decode's path
    with test_decode's GREEDY_MARGIN (assert_same_greedy_ids). Beam search returns no logits: the routes'
    spread is that of greedy decoding with the beam's use_cache (width 1 steps the rows greedy steps, a row
    dropped once it ends), and each fully compared row's beam score is held to greedy's log P of those tokens
    (its logits' float64 log-softmax, length-penalised), which sees the beam's own logits."""
    greedy, logits = ct.decode.greedy_decode(model, src, src_mask, max_len, start, end, return_logits=True)
    route_logits = ct.decode.greedy_decode(model, src, src_mask, max_len, start, end, use_cache=use_cache,
                                           return_logits=True)[1]
    ids, scores = ct.decode.beam_search(model, src, src_mask, max_len, start, end, beam_size=1, alpha=alpha,
                                        use_cache=use_cache)
    assert ids.shape == greedy.shape and scores.shape == (len(src),) and scores.dtype == np.float64
    assert_same_greedy_ids(greedy, logits, ids, route_logits, what=f"beam 1 (use_cache={use_cache}) vs greedy")
    x = logits.astype(np.float64)
    top = x.max(-1, keepdims=True)                   # NaN after a row ended
    logp = x - top - np.log(np.exp(x - top).sum(-1, keepdims=True))
    for r in range(len(src)):
        n = int((~np.isnan(logp[r, :, 0])).sum())   # steps taken: the tokens after start, the end included
        if np.array_equal(ids[r], greedy[r]):
            log_p = logp[r, np.arange(n), greedy[r, 1:n + 1]].sum()
            assert abs(scores[r] - log_p / lp(n, alpha)) <= GREEDY_MARGIN / 10, (r, scores[r], log_p)
    return greedy, logits, ids


@pytest.mark.parametrize("use_cache", [True, False])
def test_beam_size_one_is_greedy_post_norm(use_cache):
    """Seen: smallest gap on greedy's paths 1.2e-2 (120x GREEDY_MARGIN; the steps up to 19 that the torch test
    does not check included), every step compared; greedy's routes differ by <= 1e-6, the beam's scores from
    greedy's log P by <= 7.5e-7."""
    model = post_norm_model("untied", seed=6)
    src, src_mask = post_norm_batch(seed=6)
    for end in (5, 12, 40):   # ends in some rows, in every row, in none
        assert_beam_one_is_greedy(model, src, src_mask, 20, START, end, use_cache)


def test_beam_size_one_is_greedy_pre_norm():
    model = pre_norm_model(seed=5)
    x, src_mask = pre_norm_batch(b=4, seed=5)
    plain, plain_logits = ct.decode.greedy_decode(model, x, src_mask, 50, 0, return_logits=True)
    end = int(plain[1, 7])   # a token row 1 produces, so at least one row ends early
    greedy, greedy_logits, ids = assert_beam_one_is_greedy(model, x, src_mask, 50, 0, end)
    # Row 1 ends where the plain decode produced that token: the same tokens up to there (the decode with an
    # end drops finished rows, another float32 route).
    assert_same_greedy_ids(greedy, greedy_logits, plain, plain_logits, whole_rows=False, what="with end vs plain")
    assert (ids[1, 8:] == pre_ref.PAD).all()


# ---- cached == uncached; batch == one by one ------------------------------------------------------------
def test_cached_beam_equals_uncached():
    model = post_norm_model("untied", seed=2)
    src, src_mask = post_norm_batch(seed=2)
    a_ids, a_scores = ct.decode.beam_search(model, src, src_mask, 14, START, 7, beam_size=4, n_best=4)
    b_ids, b_scores = ct.decode.beam_search(model, src, src_mask, 14, START, 7, beam_size=4, n_best=4,
                                            use_cache=False)
    assert a_ids.shape == (4, 4, 14) and a_scores.shape == (4, 4)
    # Seen: smallest decision gap per source 5.5e-3, 4.8e-3, 7.2e-4 (a pruning boundary), 3.2e-3; spread 2.4e-6.
    traces = [traced_beam_search(model, src, src_mask, 14, START, 7, 4, 0.6, 4, use_cache)
              for use_cache in (True, False)]
    assert_same_search(*traces, a_ids, a_scores, b_ids, b_scores, PAD, at_least=4, what="cached vs uncached")


def test_pre_norm_cached_beam_equals_uncached():
    model = pre_norm_model(seed=6)
    x, src_mask = pre_norm_batch(b=2, seed=6)
    a = ct.decode.beam_search(model, x, src_mask, 30, 0, 1, beam_size=3, n_best=3)
    b = ct.decode.beam_search(model, x, src_mask, 30, 0, 1, beam_size=3, n_best=3, use_cache=False)
    # Seen: smallest decision gap per source 2.7e-3, 1.0e-2; spread 3.3e-6.
    traces = [traced_beam_search(model, x, src_mask, 30, 0, 1, 3, 0.6, 3, use_cache) for use_cache in (True, False)]
    assert_same_search(*traces, *a, *b, pre_ref.PAD, at_least=2, what="cached vs uncached")


def test_batch_is_searched_source_by_source():
    """A source alone runs 1 to 3 decoder rows a step where the batch runs 4 to 12 (other BLAS blockings, and
    weights packed only for 3 rows or more): another float32 route, so each source's search is compared where
    its decisions clear BEAM_MARGIN. Source 0's do not: at its 4th step the 3rd and 4th candidates are 5.2e-5
    apart in log P ((2, 10, 25, 36, 25) kept, (2, 10, 9, 29, 13) dropped), which a legal order could swap; the
    other three clear it by 1.1e-3 or more (spread 2.3e-6), and all three must be compared."""
    model = post_norm_model("untied", seed=2)
    src, src_mask = post_norm_batch(seed=2)
    args = (14, START, 7, 3, 1.0, 2)
    ids, scores = ct.decode.beam_search(model, src, src_mask, *args[:3], beam_size=3, alpha=1.0, n_best=2)
    one = [ct.decode.beam_search(model, src[r:r + 1], src_mask[r:r + 1], *args[:3], beam_size=3, alpha=1.0, n_best=2)
           for r in range(len(src))]
    alone = [traced_beam_search(model, src[r:r + 1], src_mask[r:r + 1], *args) for r in range(len(src))]
    alone = tuple([t[i][0] for t in alone] for i in range(3))   # one trace of the sources searched alone
    assert_same_search(traced_beam_search(model, src, src_mask, *args), alone, ids, scores,
                              np.concatenate([i for i, _ in one]), np.concatenate([c for _, c in one]), PAD,
                              at_least=3, what="batch vs source by source")


# ---- against brute force on a tiny vocabulary -------------------------------------------------------------
TINY_V, TINY_PAD, TINY_START, TINY_END, TINY_MAX_LEN = 5, 0, 1, 2, 5


def tiny_model(seed):
    """Source vocabulary 9, target vocabulary 5 (0 pad, 1 start, 2 end, 3 and 4 words), untied."""
    options = dict(trg_emb_prj_weight_sharing=False, emb_src_trg_weight_sharing=False)
    ct.manual_seed(seed)
    model = sharpen(ct.nn.Transformer(9, TINY_V, TINY_PAD, TINY_PAD, **SMALL, **options), seed).eval()
    ref = post_ref.Transformer(9, TINY_V, TINY_PAD, TINY_PAD, **SMALL, **options).eval()
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
    model = post_norm_model("prj-tied", seed=6)
    ref = post_ref.Transformer(VOCAB, VOCAB, PAD, PAD, **SMALL).eval()
    ct_to_torch(model, ref)
    src, src_mask = post_norm_batch(seed=6)
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
    model = post_norm_model("prj-tied")
    src, src_mask = post_norm_batch()
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
    model = post_norm_model("prj-tied")
    src, src_mask = post_norm_batch()
    args = dict(max_len=5, end_symbol=3, beam_size=4, alpha=0.6, n_best=None)
    args.update(change)
    with pytest.raises(error, match=message):
        ct.decode.beam_search(model, src, src_mask, args["max_len"], START, args["end_symbol"],
                              beam_size=args["beam_size"], alpha=args["alpha"], n_best=args["n_best"])
