"""Greedy decoding (the Annotated Transformer's greedy_decode) with key/value caches:
ctransformer.decode.greedy_decode.

What is proved, for the post-norm Transformer (jadore801120's model; small config, padded batch, random
weights) in four weight-sharing/scaling variants and for the toy translator (the pre-norm preset, -inf
masks, the toy translator's own batches):
- the cached decode returns the same ids as the uncached one (the Annotated Transformer's greedy loop: the
  whole prefix decoded at every step), and every step's logits agree;
- both return the ids of that greedy loop run in torch on the reference models of tests/reference/
  (same state dict), and the step logits agree with torch's;
- end_symbol: rows that produced it are padded with trg_pad_idx afterwards, decoding stops when every
  row is done, and the tokens before it are those of the decode without end_symbol;
- bad arguments raise errors that name them.

Tolerances and margins (float32; the cached decode multiplies (rows, d) matrices where the uncached one
multiplies (rows * t, d) ones, a batch packs its weights where one row does not, torch sums in its own
order, so two routes differ in rounding):
- ids are an arg-max, a knife edge (DEVELOPING.md, "Parity tests and knife edges"): two routes pick the
  same token only where the top-1/top-2 logit gap exceeds their logits' difference. Every id comparison
  goes through assert_same_greedy_ids: along one route's path, up to its first step whose gap is below
  GREEDY_MARGIN = 1e-4, with the two routes' logits over those steps asserted within GREEDY_MARGIN / 10.
  Measured (AVX-512, and with OPENBLAS_CORETYPE=Haswell/Prescott, CTRANSFORMER_KERNEL_LEVEL=x86-64-v3/
  x86-64): the routes differ by <= 1.9e-6 (cached vs uncached, the toy translator), <= 1.1e-6 (a row
  alone vs in the batch), <= 2e-6 (ct vs torch), so the margin is >= 50x any of them; the smallest gap on
  a compared path is 9.4e-4 (the toy translator's preset, not sharpened), 9x the margin, so every step is
  compared today and at least 90% must be;
- logits at fixed ids (StepDecoder.select): |d| <= 1e-5 + 1e-5 |x| (seen <= 1e-6 on logits up to ~10).
"""

import numpy as np
import pytest
import torch

import ctransformer as ct
from helpers import assert_close, assert_releases_gil
from reference import post_norm as post_ref
from reference import pre_norm as pre_ref
from reference.parity import ct_to_torch, single_threaded_torch  # noqa: F401 (autouse fixture)
from kernel_levels import every_level

# Every test at each level's searches, few-rows and packed products (kernels/simd/search.cpp, kernels/fp32/).
at_every_level = every_level("loops")

SMALL = dict(d_word_vec=32, d_model=32, d_inner=64, n_layers=2, n_head=4, d_k=8, d_v=8)
PAD, START, VOCAB = 1, 2, 41
VARIANTS = {
    "prj-tied": dict(),
    "emb-tied": dict(scale_emb_or_prj="emb"),
    "none-tied": dict(scale_emb_or_prj="none"),
    "untied": dict(trg_emb_prj_weight_sharing=False, emb_src_trg_weight_sharing=False),
    # A distilled student's shape: 3 encoder layers and 1 decoder layer of 2 heads of 16, FFN 48 (the caches and
    # the decoder's loops take the decoder's own sizes).
    "asymmetric": dict(encoder_n_layers=3, decoder_n_layers=1, decoder_n_head=2, decoder_d_k=16, decoder_d_v=16,
                       decoder_d_inner=48),
}
CACHE_TOL = dict(rtol=1e-5, atol=1e-5)   # logits at fixed ids, cached vs uncached


def sharpen(model, seed, scale=0.8):
    """Random weights (matrices N(0, scale^2 / fan_in), embeddings N(0, 1), LayerNorm gains 1 + N(0, 0.04))
    so attention is peaked, the pad mask and every position matter, and the decoded tokens vary more
    than with the init's (random models still like to repeat a token, the tied ones most)."""
    rng = np.random.default_rng(seed)
    state = {}
    for name, value in model.state_dict().items():
        if "pos_table" in name or name.endswith(".pe"):
            state[name] = value                                   # the fixed sinusoid table
        elif "norm" in name and name.endswith("weight"):
            state[name] = (1 + 0.2 * rng.standard_normal(value.shape)).astype(np.float32)
        elif value.ndim == 1:
            state[name] = (0.1 * rng.standard_normal(value.shape)).astype(np.float32)
        else:
            std = 1.0 if ("emb" in name or "embed" in name) else scale / np.sqrt(value.shape[-1])
            state[name] = (std * rng.standard_normal(value.shape)).astype(np.float32)
    model.load_state_dict(state)   # tied names hold one tensor: the last array written wins
    return model


def post_norm_model(variant, seed=0):
    ct.manual_seed(seed)
    model = ct.nn.Transformer(VOCAB, VOCAB, PAD, PAD, **SMALL, **VARIANTS[variant])
    return sharpen(model, seed).eval()


def post_norm_batch(seed=0):
    """src (4, 11) with PAD tails of different lengths (one row unpadded)."""
    rng = np.random.default_rng(seed)
    src = rng.integers(3, VOCAB, (4, 11))
    src[0, 7:] = PAD
    src[2, 10:] = PAD
    src[3, 4:] = PAD
    return src, ct.nn.get_pad_mask(src, PAD)


def pre_norm_model(seed=0):
    ct.manual_seed(seed)
    return sharpen(ct.nn.Transformer.small_pre_norm(), seed).eval()


def pre_norm_batch(b=6, seed=0):
    x, _ = pre_ref.get_batch(b, seed=seed)   # the toy translator's get_data: 50 ids, <SOS> ... <EOS> <PAD>...
    return x, ct.nn.get_pad_mask(x, pre_ref.PAD)


# The smallest top-1/top-2 logit gap at which two float32 routes of the same greedy decode must pick the
# same token: >= 50x the largest difference measured between any two routes compared here (1.9e-6), and
# asserted on every run to be >= 10x the difference of the two routes being compared.
GREEDY_MARGIN = 1e-4


def top2_gaps(logits):
    """(b, steps): each step's gap between its best and second-best logit, NaN after the row ended."""
    top = np.sort(logits, axis=-1)      # a NaN row sorts as NaN and gives NaN
    return top[..., -1] - top[..., -2]


def assert_same_greedy_ids(ids, logits, other_ids, other_logits=None, whole_rows=True, what=""):
    """The ids (and return_logits logits) of a greedy decode against other_ids of the same decode by another
    float32 route. Row r is compared along this decode's path up to and including its first step whose gap
    is below GREEDY_MARGIN: every step before it reads the same prefix on both routes and is decided by more
    than they can disagree on (their logits over those steps differ by at most GREEDY_MARGIN / 10, asserted
    when other_logits is given), so it picks the same token; the thin step itself may legally go either way,
    and the paths may part after it. A row whose every step clears the margin is compared whole (where it
    ends and the padding after it), or up to its last chosen token if not whole_rows (the other route had
    no end_symbol). At least 90% of the steps taken must be compared (seen: all), or the test proves little.
    Returns (steps compared, steps taken)."""
    gaps = top2_gaps(logits)
    compared = taken = 0
    spread = 0.0
    for r in range(len(ids)):
        n = int((~np.isnan(gaps[r])).sum())         # the steps this row took
        thin = np.flatnonzero(gaps[r, :n] < GREEDY_MARGIN)
        k = int(thin[0]) if len(thin) else n          # steps 0 .. k - 1 are decided beyond rounding
        if k == n and whole_rows:
            np.testing.assert_array_equal(other_ids[r], ids[r], err_msg=f"{what}: row {r}")
        else:
            np.testing.assert_array_equal(other_ids[r, :k + 1], ids[r, :k + 1],
                                          err_msg=f"{what}: row {r} up to step {k} (gap {gaps[r, min(k, n - 1)]:.3g})")
        if other_logits is not None and n:
            same_prefix = min(k + 1, n)               # steps 0 .. k read the same prefix on both routes
            spread = max(spread, float(np.abs(other_logits[r, :same_prefix] - logits[r, :same_prefix]).max()))
            if k == n and whole_rows:                 # the same steps taken: NaN where this row's are
                np.testing.assert_array_equal(np.isnan(other_logits[r]), np.isnan(logits[r]), err_msg=what)
        compared, taken = compared + k, taken + n
    assert spread <= GREEDY_MARGIN / 10, f"{what}: the routes' logits differ by {spread:.3g}"
    assert compared >= 0.9 * taken, f"{what}: only {compared} of {taken} steps clear GREEDY_MARGIN " \
                                    f"(smallest gap {np.nanmin(gaps):.3g})"
    return compared, taken


def assert_cached_equals_uncached(model, src, src_mask, max_len, start, end=None):
    ids, logits = ct.decode.greedy_decode(model, src, src_mask, max_len, start, end, return_logits=True)
    ref_ids, ref_logits = ct.decode.greedy_decode(model, src, src_mask, max_len, start, end, use_cache=False,
                                                  return_logits=True)
    assert ids.dtype == np.int64 and ids.shape == (src.shape[0], max_len)
    assert logits.dtype == np.float32 and logits.shape == (src.shape[0], max_len - 1, model.config.n_trg_vocab)
    assert_same_greedy_ids(ref_ids, ref_logits, ids, logits, what="cached vs uncached")
    return ids, logits


# ---- cached == uncached -----------------------------------------------------------------------------
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_post_norm_cached_equals_uncached(variant):
    model = post_norm_model(variant)
    src, src_mask = post_norm_batch()
    ids, _ = assert_cached_equals_uncached(model, src, src_mask, 16, START)
    assert (ids[:, 0] == START).all()
    if variant == "untied":
        assert len(np.unique(ids[:, 1:])) >= 6, "a degenerate decode would prove little"


def test_post_norm_cached_equals_uncached_without_mask_and_with_a_broadcast_mask():
    model = post_norm_model("prj-tied", seed=1)
    src, src_mask = post_norm_batch(seed=1)
    assert_cached_equals_uncached(model, src, None, 12, START)
    # A (1, 1, ls) mask broadcasts over the batch: the same as repeating it per row. Cached against uncached,
    # so another float32 route: the ids along the path's clear steps (smallest gap seen 5.4e-3, 54x the
    # margin; the logits differ by <= 1.5e-7).
    one = src_mask[:1]
    a = ct.decode.greedy_decode(model, src, one, 12, START, return_logits=True)
    b = ct.decode.greedy_decode(model, src, np.repeat(one, len(src), axis=0), 12, START, use_cache=False,
                                return_logits=True)
    assert_same_greedy_ids(*b, *a, what="broadcast mask vs repeated")


def test_pre_norm_cached_equals_uncached():
    model = pre_norm_model()
    x, src_mask = pre_norm_batch()
    ids, _ = assert_cached_equals_uncached(model, x, src_mask, 50, pre_ref.VOCAB_Y["<SOS>"])
    assert len(np.unique(ids[:, 1:])) >= 8


def test_pre_norm_trained_preset_decodes_the_same_cached():
    """The preset as the toy translator builds it (N(0, 0.1) embeddings, torch's default init), not
    sharpened: its logits lie closer together (smallest gap on the path 9.4e-4, 9x GREEDY_MARGIN; the routes
    differ by <= 7.2e-7)."""
    ct.manual_seed(4)
    model = ct.nn.Transformer.small_pre_norm().eval()
    x, src_mask = pre_norm_batch(b=3, seed=2)
    assert_cached_equals_uncached(model, x, src_mask, 50, 0)


def test_batch_rows_are_independent():
    """Decoding a row alone gives what it got in the padded batch. Another float32 route (a batch of 4 reads
    packed weights, one row does not; BLAS blocks other shapes): ids along the batch's clear steps (smallest
    gap 4.0e-3, 40x the margin; a row's logits differ by <= 1.1e-6 between the two)."""
    model = post_norm_model("untied", seed=2)
    src, src_mask = post_norm_batch(seed=2)
    ids, logits = ct.decode.greedy_decode(model, src, src_mask, 14, START, return_logits=True)
    for r in range(len(src)):
        one, one_logits = ct.decode.greedy_decode(model, src[r:r + 1], src_mask[r:r + 1], 14, START,
                                                  return_logits=True)
        assert_same_greedy_ids(ids[r:r + 1], logits[r:r + 1], one, one_logits, what=f"row {r} alone")


# ---- against the Annotated Transformer's greedy loop in torch ------------------------------------------
def torch_greedy_post_norm(ref, src, src_mask, max_len, start_symbol):
    """The Annotated Transformer's greedy_decode on the post-norm reference, for a batch: encode once; at
    each step decode the prefix under the subsequent mask, take the last position through the generator
    (log_softmax(proj(x))) and append its torch.max. Returns (ids, step logits)."""
    with torch.no_grad():
        memory, *_ = ref.encoder(src, src_mask)
        ys = torch.full((src.size(0), 1), start_symbol, dtype=src.dtype)
        steps = []
        for _ in range(max_len - 1):
            out, *_ = ref.decoder(ys, post_ref.get_subsequent_mask(ys), memory, src_mask)
            logits = ref.trg_word_prj(out[:, -1])
            if ref.scale_prj:
                logits *= ref.d_model ** -0.5
            prob = torch.log_softmax(logits, dim=-1)
            _, next_word = torch.max(prob, dim=1)
            ys = torch.cat([ys, next_word[:, None].type_as(src)], dim=1)
            steps.append(logits)
    return ys.numpy(), torch.stack(steps, 1).numpy()


def torch_greedy_pre_norm(ref, x, max_len, start_symbol):
    """The Annotated Transformer's greedy loop on the pre-norm reference: the toy translator's pad mask of x
    (True = masked, -inf) for the encoder and the cross-attention, and the no-peek mask (its upper
    triangle) for the target."""
    with torch.no_grad():
        b, ls = x.shape
        mask_x = (x == pre_ref.PAD).reshape(b, 1, 1, ls)
        memory = ref.encoder(ref.embed_x(x), mask_x)
        ys = torch.full((b, 1), start_symbol, dtype=x.dtype)
        steps = []
        for _ in range(max_len - 1):
            lt = ys.size(1)
            no_peek = (1 - torch.tril(torch.ones(1, 1, lt, lt, dtype=torch.long))).bool()
            out = ref.decoder(memory, ref.embed_y(ys), mask_x, no_peek)
            logits = ref.fc_out(out[:, -1])
            _, next_word = torch.max(torch.log_softmax(logits, dim=-1), dim=1)
            ys = torch.cat([ys, next_word[:, None].type_as(x)], dim=1)
            steps.append(logits)
    return ys.numpy(), torch.stack(steps, 1).numpy()


@pytest.mark.parametrize("variant", ["prj-tied", "untied"])
def test_post_norm_greedy_equals_torch_reference(variant):
    model = post_norm_model(variant, seed=6)
    ref = post_ref.Transformer(VOCAB, VOCAB, PAD, PAD, **SMALL, **VARIANTS[variant]).eval()
    ct_to_torch(model, ref)
    src, src_mask = post_norm_batch(seed=6)
    expected, expected_logits = torch_greedy_post_norm(ref, torch.from_numpy(src), torch.from_numpy(src_mask), 16,
                                                       START)
    assert len(np.unique(expected[:, 1:])) >= 5
    for use_cache in (True, False):
        ids, logits = ct.decode.greedy_decode(model, src, src_mask, 16, START, use_cache=use_cache, return_logits=True)
        assert_same_greedy_ids(expected, expected_logits, ids, logits, what=f"vs torch (use_cache={use_cache})")


def test_the_encoder_skips_the_pads_and_a_wholly_masked_sentence_keeps_its_rows():
    """Decoding runs the encoder's feed-forward on the rows its source mask leaves visible (the pads are read by
    no query), which torch's encoder computes too: the logits stay torch's. A sentence whose every position is
    masked attends to all of them alike (a softmax of equal -1e9 scores), so its rows are read and must be
    computed: here row 1 is all padding, and its logits, which read those rows, are torch's (with those rows
    skipped too they moved by 0.73; the margins are assert_same_greedy_ids's)."""
    model = post_norm_model("untied", seed=7)
    ref = post_ref.Transformer(VOCAB, VOCAB, PAD, PAD, **SMALL, **VARIANTS["untied"]).eval()
    ct_to_torch(model, ref)
    src, src_mask = post_norm_batch(seed=7)
    src[1, :] = PAD
    src_mask = ct.nn.get_pad_mask(src, PAD)
    expected, expected_logits = torch_greedy_post_norm(ref, torch.from_numpy(src), torch.from_numpy(src_mask), 12,
                                                       START)
    for use_cache in (True, False):
        ids, logits = ct.decode.greedy_decode(model, src, src_mask, 12, START, use_cache=use_cache, return_logits=True)
        assert_same_greedy_ids(expected, expected_logits, ids, logits, what=f"vs torch (use_cache={use_cache})")


def test_pre_norm_greedy_equals_torch_reference():
    model = pre_norm_model(seed=5)
    ref = pre_ref.Transformer().eval()
    ct_to_torch(model, ref)
    x, src_mask = pre_norm_batch(b=4, seed=5)
    sos = pre_ref.VOCAB_Y["<SOS>"]
    expected, expected_logits = torch_greedy_pre_norm(ref, torch.from_numpy(x), 50, sos)
    assert len(np.unique(expected[:, 1:])) >= 8
    ids, logits = ct.decode.greedy_decode(model, x, src_mask, 50, sos, return_logits=True)
    assert_same_greedy_ids(expected, expected_logits, ids, logits, what="vs torch")


# ---- end_symbol ---------------------------------------------------------------------------------------
def end_symbol_case():
    """A model whose plain decode (20 positions) has token 5 in some rows only and token 12 in every row.
    Every step of it clears GREEDY_MARGIN (smallest gap 1.25e-2), so it is the same decode on any CPU."""
    model = post_norm_model("untied", seed=6)
    src, src_mask = post_norm_batch(seed=6)
    plain, plain_logits = ct.decode.greedy_decode(model, src, src_mask, 20, START, return_logits=True)
    assert (top2_gaps(plain_logits) >= GREEDY_MARGIN).all()
    in_rows = lambda w: int((plain[:, 1:] == w).any(1).sum())  # noqa: E731
    assert 0 < in_rows(5) < len(src) and in_rows(12) == len(src)
    return model, src, src_mask, plain, plain_logits


def first_end(row, end):
    """The column of the first end after the start symbol, or None."""
    hits = np.flatnonzero(row[1:] == end)
    return int(hits[0]) + 1 if len(hits) else None


@pytest.mark.parametrize("end", [5, 12], ids=["some-rows-end", "every-row-ends"])
def test_end_symbol_pads_rows_that_ended(end):
    model, src, src_mask, plain, plain_logits = end_symbol_case()
    ids, logits = assert_cached_equals_uncached(model, src, src_mask, 20, START, end)
    # The same tokens as the plain decode up to the end (a row that never ended: all of them). Once a row
    # ends the decoder drops it, so the other rows run in a smaller batch: another float32 route.
    assert_same_greedy_ids(ids, logits, plain, plain_logits, whole_rows=False, what="with end_symbol vs plain")
    for r in range(len(src)):
        stop = first_end(ids[r], end)
        if stop is None:   # never ended: decoded to max_len
            assert not np.isnan(logits[r]).any()
            continue
        assert (ids[r, stop + 1:] == PAD).all(), "after end_symbol come trg_pad_idx ids"
        assert np.isnan(logits[r, stop:]).all() and not np.isnan(logits[r, :stop]).any()


def test_decoding_stops_once_every_row_ended():
    model, src, src_mask, *_ = end_symbol_case()
    ids, logits = ct.decode.greedy_decode(model, src, src_mask, 20, START, 12, return_logits=True)
    last = max(first_end(row, 12) for row in ids)
    assert last < 19
    # No step ran after the last row ended: the steps predicting columns last + 1 .. 19 hold NaN.
    assert np.isnan(logits[:, last:]).all()
    assert (ids[:, last + 1:] == PAD).all()


def test_max_len_one_and_the_annotated_transformers_signature():
    model = post_norm_model("prj-tied")
    src, src_mask = post_norm_batch()
    np.testing.assert_array_equal(ct.decode.greedy_decode(model, src, src_mask, 1, START), np.full((4, 1), START))
    # Positional arguments and NumPy integers, as tasks/copy.py and toy_translate.py call it: converted before
    # anything runs, so the same computation as the call with Python ints (equal by construction, no margin).
    a = ct.decode.greedy_decode(model, src.astype(np.int32), src_mask, np.int64(6), np.int32(START))
    np.testing.assert_array_equal(a, ct.decode.greedy_decode(model, src, src_mask, 6, START))


def test_step_decoder_select_follows_rows():
    """StepDecoder.select keeps, reorders and repeats rows: after select([2, 0, 0]) the rows decode as
    rows 2, 0 and 0 of the original batch."""
    model = post_norm_model("untied", seed=8)
    src, src_mask = post_norm_batch(seed=8)
    for use_cache in (True, False):
        dec = ct.decode.StepDecoder(model, src, src_mask, use_cache=use_cache)
        first = dec.step(np.full(4, START)).numpy()
        nxt = first.argmax(-1)
        dec.select([2, 0, 0])
        assert dec.rows == 3 and dec.length == 1
        second = dec.step(nxt[[2, 0, 0]]).numpy()
        full = ct.decode.StepDecoder(model, src, src_mask, use_cache=use_cache)
        full.step(np.full(4, START))
        expected = full.step(nxt).numpy()
        assert_close(second, expected[[2, 0, 0]], **CACHE_TOL, what=f"use_cache={use_cache}")


def check_selects_against_the_uncached_decoder(seed, orders):
    """A first step for every source, then for each `rows` of `orders` a select and a step with fixed ids (not
    an arg-max a near-tie could flip): the cached decoder's logits against the uncached one's, which
    recomputes every step from its reordered prefixes."""
    model = post_norm_model("untied", seed=seed)
    src, src_mask = post_norm_batch(seed=seed)
    rng = np.random.default_rng(seed)
    ids = [rng.integers(4, model.config.n_trg_vocab, size=len(rows)) for rows in orders]
    logits = {}
    for use_cache in (True, False):
        dec = ct.decode.StepDecoder(model, src, src_mask, use_cache=use_cache)
        got = [dec.step(np.full(len(src), START)).numpy()]
        for step, rows in enumerate(orders):
            dec.select(rows)
            got.append(dec.step(ids[step]).numpy())
        logits[use_cache] = got
    for step, (a, b) in enumerate(zip(logits[True], logits[False])):
        assert_close(a, b, **CACHE_TOL, what=f"step {step}")


def test_step_decoder_select_in_place_cycles_swaps_and_repeats():
    """select reorders the cached keys and values through a row map (decode/kv_cache.cpp: a row kept or
    moved changes the map only, a repeated row is copied into a dropped row's storage). A cycle with a
    repeat, a reversal and a pair of repeats, over four steps, against the decoder without a cache, which
    recomputes every step from its reordered prefixes."""
    check_selects_against_the_uncached_decoder(seed=9, orders=([1, 2, 0, 1], [3, 2, 1, 0], [0, 0, 3, 3]))


def test_step_decoder_select_drops_and_repeats_sources():
    """The cross-attention's keys/values are not copied per row: rows read their source's through a row
    map (decode/kv_cache.cpp: share_rows), composed at each select. Rows dropped, then repeated, then
    spread over more rows than there are sources, against the decoder without a cache."""
    check_selects_against_the_uncached_decoder(seed=10, orders=([2, 0], [1, 1, 0], [2, 0, 1, 2, 2], [4, 0]))


def test_decoding_records_no_graph_and_keeps_grad_mode():
    model = post_norm_model("prj-tied")
    src, src_mask = post_norm_batch()
    assert ct.is_grad_enabled()
    ct.decode.greedy_decode(model, src, src_mask, 5, START)
    ct.decode.beam_search(model, src, src_mask, 5, START, 3)
    assert ct.is_grad_enabled()
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.threads
def test_decoding_releases_the_gil():
    """Decoding (greedy, then beam search) lets another Python thread run meanwhile (helpers.assert_releases_gil)."""
    model = pre_norm_model()
    x, src_mask = pre_norm_batch(b=32, seed=1)

    def work():
        for _ in range(2):
            ct.decode.greedy_decode(model, x, src_mask, 50, 0)
            ct.decode.beam_search(model, x[:8], src_mask[:8], 50, 0, 1, beam_size=4)

    assert_releases_gil(work)


# ---- bad arguments ------------------------------------------------------------------------------------
BAD = [
    ("max_len 0", dict(max_len=0), ValueError, "max_len must be at least 1"),
    ("max_len -3", dict(max_len=-3), ValueError, "max_len must be at least 1"),
    ("max_len float", dict(max_len=5.0), TypeError, "max_len"),
    ("max_len > n_position + 1", dict(max_len=202), ValueError, "max_len = 202"),
    ("mask batch", dict(src_mask="bad batch"), ValueError, "src_mask must have shape"),
    ("mask length", dict(src_mask="bad length"), ValueError, "src_mask must have shape"),
    ("mask rank", dict(src_mask="2-d"), ValueError, "src_mask must have shape"),
    ("src id", dict(src="bad id"), IndexError, "src holds token id 41"),
    ("src 1-d", dict(src="1-d"), ValueError, "src must be a 2-D"),
    ("src too long", dict(src="too long"), ValueError, "src has length 201, longer than n_position = 200"),
    ("src float", dict(src="float"), TypeError, "src"),
    ("start id", dict(start_symbol=VOCAB), IndexError, "start_symbol = 41"),
    ("end id", dict(end_symbol=-1), IndexError, "end_symbol = -1"),
]


@pytest.mark.parametrize("name,change,error,message", BAD, ids=[b[0] for b in BAD])
def test_greedy_decode_bad_arguments_name_them(name, change, error, message):
    model = post_norm_model("prj-tied")
    src, src_mask = post_norm_batch()
    args = dict(src=src, src_mask=src_mask, max_len=5, start_symbol=START, end_symbol=None)
    special = {
        "bad batch": src_mask[:2], "bad length": src_mask[:, :, :-1], "2-d": src_mask[:, 0],
        "bad id": np.where(src == 5, VOCAB, src), "1-d": src[0], "float": src.astype(np.float32),
        "too long": np.full((1, 201), 3),
    }
    for key, value in change.items():
        args[key] = special[value] if isinstance(value, str) else value
    if name == "src too long":
        args["src_mask"] = None
    with pytest.raises(error, match=message):
        ct.decode.greedy_decode(model, args["src"], args["src_mask"], args["max_len"], args["start_symbol"],
                                args["end_symbol"])
    if error is not TypeError:   # beam search checks the same arguments the same way
        with pytest.raises(error, match=message.replace("greedy_decode", "beam_search")):
            ct.decode.beam_search(model, args["src"], args["src_mask"], args["max_len"], args["start_symbol"],
                                  VOCAB - 1 if args["end_symbol"] is None else args["end_symbol"])


def test_a_source_that_may_attend_nowhere_is_refused_under_inf_masking():
    """The toy translator fills masked scores with -inf: a source row whose mask is all False would give NaN."""
    model = pre_norm_model()
    x, src_mask = pre_norm_batch(b=2)
    src_mask = src_mask.copy()
    src_mask[1] = False
    with pytest.raises(ValueError, match="src_mask row 1 masks every source position"):
        ct.decode.greedy_decode(model, x, src_mask, 5, 0)
    # The post-norm Transformer's -1e9 fill keeps such a row finite (uniform attention): allowed.
    model0 = post_norm_model("prj-tied")
    src, mask0 = post_norm_batch()
    mask0 = mask0.copy()
    mask0[1] = False
    assert np.isfinite(ct.decode.greedy_decode(model0, src, mask0, 5, START, return_logits=True)[1]).all()


def test_step_decoder_bad_arguments():
    model = post_norm_model("prj-tied")
    src, src_mask = post_norm_batch()
    dec = ct.decode.StepDecoder(model, src, src_mask)
    with pytest.raises(ValueError, match="one token per row"):
        dec.step(np.full(3, START))
    with pytest.raises(IndexError, match="outside the target vocabulary"):
        dec.step(np.full(4, VOCAB))
    with pytest.raises(IndexError, match="select_rows"):
        dec.select([4])
    with pytest.raises(TypeError):
        ct.decode.StepDecoder(ct.nn.GPT(10, 8, 1, 8, 2, 16, 0.0), src, src_mask)
