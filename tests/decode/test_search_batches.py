"""ct.decode.search_batches: many batches' searches in one call, each thread taking the next batch whole ("lanes").

A batch searched in a lane gives what it gives searched alone (beam_search, hf_beam_search): its products have the
same rows, and each kernel sums every output in the same order however the rows or columns are split over threads.
- int8: ids and scores bit for bit (the products are exact int32 sums; the rest is row by row);
- float32 greedy: ids along each row's path while its top-two gap clears test_decode's GREEDY_MARGIN (the
  encoder's products go through the BLAS, whose split and whole products may sum differently), scores within
  1e-5 relative (the margin's order; seen equal).
Every case runs with two threads and asserts that the call ran in lanes, so it proves the lanes, whatever the
machine's cores.
"""
import numpy as np
import pytest

import ctransformer as ct
from test_decode import PAD, START, assert_same_greedy_ids, post_norm_model

pytestmark = pytest.mark.threads   # threads, the serving engine or the server: make test-stress runs it under load

SOURCE_END = 4


@pytest.fixture
def two_threads(num_threads):
    """The maths on 2 threads; a test may set another count with num_threads: the fixture puts the count back."""
    num_threads(2)
    return num_threads


def batches_of(model, sizes, seed, max_len=12):
    """One (src, src_mask, max_len) per size: sources of mixed lengths padded with PAD, ids off the pad."""
    rng = np.random.default_rng(seed)
    out = []
    for b in sizes:
        rows = [list(rng.integers(5, model.config.n_src_vocab, int(rng.integers(2, 11)))) + [SOURCE_END]
                for _ in range(b)]
        src = np.full((b, max(map(len, rows))), PAD, dtype=np.int64)
        for r, row in enumerate(rows):
            src[r, :len(row)] = row
        out.append((src, ct.nn.get_pad_mask(src, PAD), max_len))
    return out


def end_of(model, batches):
    """A target id that some rows reach and others not, so that rows leave their batches at different steps."""
    ids = np.concatenate([ct.decode.greedy_decode(model, src, mask, n, START)[:, 1:] for src, mask, n in batches])
    reached = {t: int((ids == t).any(axis=1).sum()) for t in range(model.config.n_trg_vocab) if t not in (START, PAD)}
    return min(reached, key=lambda t: abs(reached[t] - len(ids) / 2))


SIZES = (4, 3, 5, 4, 1, 6)   # one batch of a single row: its products take the few-rows kernels, in a lane too


@pytest.mark.parametrize("search,beam", [("gnmt", 1), ("gnmt", 3), ("hf", 3)])
def test_int8_batches_in_lanes_are_bit_for_bit_each_searched_alone(two_threads, search, beam):
    model = ct.quantize_dynamic(post_norm_model("prj-tied", seed=3))
    batches = batches_of(model, SIZES, seed=1)
    end = end_of(model, batches)
    assert ct.decode.runs_in_lanes(len(batches))
    found = ct.decode.search_batches(model, batches, START, end, beam, 0.6 if search == "gnmt" else 1.0,
                                     search=search)
    assert len(found) == len(batches)
    for (src, mask, n), (ids, scores) in zip(batches, found):
        if search == "gnmt":
            alone = ct.decode.beam_search(model, src, mask, n, START, end, beam_size=beam, alpha=0.6)
        else:
            alone = ct.decode.hf_beam_search(model, src, mask, n, START, end, num_beams=beam, length_penalty=1.0)
        np.testing.assert_array_equal(ids, alone[0])
        np.testing.assert_array_equal(scores, alone[1])
    if beam == 1:   # (a beam search finds the end symbol in most rows)
        ended = np.concatenate([(ids[:, 1:] == end).any(axis=1) for ids, _ in found])
        assert 0 < ended.sum() < len(ended), "some rows should end early and some run to max_len"


def test_float32_greedy_batches_in_lanes_equal_each_decoded_alone(two_threads):
    model = post_norm_model("prj-tied", seed=3)
    batches = batches_of(model, SIZES, seed=2)
    end = end_of(model, batches)
    assert ct.decode.runs_in_lanes(len(batches))
    found = ct.decode.search_batches(model, batches, START, end, 1, 0.6)
    compared = taken = 0
    for k, ((src, mask, n), (ids, scores)) in enumerate(zip(batches, found)):
        ref_ids, ref_logits = ct.decode.greedy_decode(model, src, mask, n, START, end, return_logits=True)
        c, t = assert_same_greedy_ids(ref_ids, ref_logits, ids, what=f"batch {k}")
        compared, taken = compared + c, taken + t
        ref_scores = ct.decode.beam_search(model, src, mask, n, START, end, beam_size=1)[1]
        same = (ids == ref_ids).all(axis=1)
        np.testing.assert_allclose(scores[same], ref_scores[same], rtol=1e-5)
    assert compared >= 0.9 * taken


def test_lanes_off_and_one_thread_give_the_same_int8_search(two_threads):
    model = ct.quantize_dynamic(post_norm_model("asymmetric", seed=4))
    batches = batches_of(model, SIZES, seed=3)
    lanes = ct.decode.search_batches(model, batches, START, SOURCE_END, 2, 0.6)
    assert not ct.decode.runs_in_lanes(len(batches), lanes=False)
    split = ct.decode.search_batches(model, batches, START, SOURCE_END, 2, 0.6, lanes=False)
    two_threads(1)
    assert not ct.decode.runs_in_lanes(len(batches))
    inline = ct.decode.search_batches(model, batches, START, SOURCE_END, 2, 0.6)
    for a, b, c in zip(lanes, split, inline):
        for x, y, z in zip(a, b, c):
            np.testing.assert_array_equal(x, y)
            np.testing.assert_array_equal(x, z)


@pytest.mark.filterwarnings("ignore:autocast. bf16 is emulated")
def test_no_lanes_under_autocast(two_threads):
    with ct.autocast():
        assert not ct.decode.runs_in_lanes(4)
    assert ct.decode.runs_in_lanes(4) and not ct.decode.runs_in_lanes(1)


def test_an_error_in_one_lane_is_raised_and_the_others_stop(two_threads):
    model = ct.quantize_dynamic(post_norm_model("prj-tied", seed=3))
    batches = batches_of(model, SIZES, seed=4)
    src, mask, n = batches[3]
    bad = src.copy()
    bad[0, 0] = model.config.n_src_vocab   # out of the vocabulary: the batch's search refuses it in its lane
    batches[3] = (bad, mask, n)
    with pytest.raises(IndexError, match="outside the vocabulary"):
        ct.decode.search_batches(model, batches, START, SOURCE_END, 1, 0.6)
    # the pool is whole after it: the same call without the bad batch runs in lanes again
    del batches[3]
    assert len(ct.decode.search_batches(model, batches, START, SOURCE_END, 1, 0.6)) == len(batches)


def test_search_batches_refuses_bad_arguments_by_name():
    model = post_norm_model("prj-tied", seed=3)
    (src, mask, n), = batches_of(model, (3,), seed=5)
    with pytest.raises(TypeError, match="batches must be a list"):
        ct.decode.search_batches(model, (b for b in [(src, mask, n)]), START, SOURCE_END)
    with pytest.raises(TypeError, match=r"batches\[0\] must be a tuple \(src, src_mask, max_len\)"):
        ct.decode.search_batches(model, [(src, mask)], START, SOURCE_END)
    with pytest.raises(ValueError, match="search must be 'gnmt' or 'hf'"):
        ct.decode.search_batches(model, [(src, mask, n)], START, SOURCE_END, search="greedy")
    with pytest.raises(ValueError, match="early_stopping"):
        ct.decode.search_batches(model, [(src, mask, n)], START, SOURCE_END, search="hf", early_stopping="soon")
    with pytest.raises(TypeError, match="lanes must be True or False"):
        ct.decode.search_batches(model, [(src, mask, n)], START, SOURCE_END, lanes="yes")
    with pytest.raises(TypeError, match="model must be a ct.nn.Transformer"):
        ct.decode.search_batches(object(), [(src, mask, n)], START, SOURCE_END)
    assert ct.decode.search_batches(model, [], START, SOURCE_END) == []
