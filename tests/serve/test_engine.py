"""The continuous-batching engine (ct._core.serve.Engine over decode::SequenceBatch, issue 49 item 1) against each
request decoded alone (greedy_decode, beam_search), under arrivals mixed into running batches.

What holds, and why (cpp/include/ctransformer/decode/sequence_batch.hpp):
- a sequence's attention, layer norms and element-wise ops are computed as they are for it alone (row by row, the
  same calls); its encoder pass has no padding. Its float32 and bf16 products are not: their kernels, and so their
  summation order, depend on how many rows a product has. So float32 ids are compared where every step is decided
  by more than rounding: test_decode's GREEDY_MARGIN on greedy's top-1/top-2 gap, test_beam_search's BEAM_MARGIN on
  every decision of a traced search (the knife edges of DEVELOPING.md), scores within test_beam_search's SCORE_TOL;
- an int8 model's products are exact int32 sums with a per-row epilogue, so an int8 request comes out bit for bit
  as decoded alone: its ids and its beam score are compared exactly, every request, no margin.
"""
import time

import numpy as np
import pytest

import ctransformer as ct
from ctransformer._core.serve import SequenceOptions
from test_beam_search import BEAM_MARGIN, SCORE_TOL, traced_beam_search
from test_decode import GREEDY_MARGIN, START, VOCAB, assert_same_greedy_ids, post_norm_model, pre_norm_model
from waiting import HANG

pytestmark = pytest.mark.threads   # threads, the serving engine or the server: make test-stress runs it under load

SOURCE_END = 4   # the sources' end of sentence


def sources(model, n, seed, low=2, high=14):
    """n sources of mixed lengths (end of sentence included), ids in [5, the source vocabulary): no pad inside."""
    rng = np.random.default_rng(seed)
    vocab = model.config.n_src_vocab
    return [list(rng.integers(5, vocab, int(rng.integers(low, high)))) + [SOURCE_END] for _ in range(n)]


def end_symbol(model, srcs, max_len):
    """A target id that about half of the sources' greedy decodes reach (taken as the end symbol, so some requests
    end early and others run to max_len: a batch whose sequences come and go). Random models have no end of their
    own."""
    rows = [ct.decode.greedy_decode(model, np.array([src]), None, max_len, START)[0, 1:] for src in srcs]
    reached = {t: sum(t in row for row in rows) for t in range(model.config.n_trg_vocab) if t != START}
    return min(reached, key=lambda t: abs(reached[t] - len(srcs) / 2))


def run_engine(model, srcs, max_len, end, beam_size=1, waves=(4, 3, 5), max_rows=6, cancel=()):
    """Each source through one engine, submitted in waves: a wave joins once the running batch has made a few
    tokens (or steps), so newcomers are admitted beside sequences at other positions; `cancel` names sources whose
    requests are cancelled mid-way. Returns ({source index: (ids, score)}, the engine's stats)."""
    engine = ct._core.serve.Engine(max_queue=64, max_rows=max_rows, max_batch_tokens=64)
    engine.add_model("m", model, START, end)
    ids_of, results, cancelled = {}, {}, set()
    pending = list(range(len(srcs)))
    deadline = time.monotonic() + HANG

    def collect(events):
        for event in events:
            s = ids_of[event.request]
            assert event.kind in ("token", "finished", "cancelled"), (event.kind, event.message)
            if event.kind == "finished":
                results[s] = (event.ids, event.score)
            elif event.kind == "cancelled":
                cancelled.add(s)

    for wave in waves:
        for s in pending[:wave]:
            ids_of[engine.submit("m", srcs[s], SequenceOptions(max_len=max_len, beam_size=beam_size))] = s
        pending = pending[wave:]
        steps = engine.stats()["steps_total"]
        while (engine.stats()["steps_total"] < steps + 3 and len(results) + len(cancelled) < len(ids_of)
               and time.monotonic() < deadline):
            collect(engine.poll(0.01))
        for request, s in ids_of.items():
            if s in cancel and s not in results and s not in cancelled:
                engine.cancel(request)
    for s in pending:
        ids_of[engine.submit("m", srcs[s], SequenceOptions(max_len=max_len, beam_size=beam_size))] = s
    while len(results) + len(cancelled) < len(srcs) and time.monotonic() < deadline:
        collect(engine.poll(0.05))
    stats = engine.stats()
    engine.stop()
    assert len(results) + len(cancelled) == len(srcs), f"{len(results)} finished of {len(srcs)} in {HANG} s"
    return results, stats


def padded_row(ids, max_len, pad, end, start=START):
    """An engine translation (start and end removed) as greedy_decode's output row: start, the tokens, the end
    symbol where it ended before the last position, then pad. (It ended iff it holds fewer than max_len - 1 ids,
    or it ended exactly at the last position: max_len - 2 ids and the end.)"""
    row = [start] + list(ids)
    if len(row) < max_len:
        row.append(end)
    return np.array(row + [pad] * (max_len - len(row)))


MODELS = {"post-norm": lambda: post_norm_model("prj-tied", seed=3), "pre-norm": lambda: pre_norm_model(seed=1),
          "asymmetric": lambda: post_norm_model("asymmetric", seed=4)}


@pytest.mark.parametrize("name", list(MODELS))
def test_greedy_requests_equal_each_decoded_alone(name):
    """Float32: every request's ids equal greedy_decode of its source alone, along its path's clear steps."""
    model = MODELS[name]()
    srcs, max_len = sources(model, 12, seed=1), 14
    end = end_symbol(model, srcs, max_len)
    results, _ = run_engine(model, srcs, max_len, end)
    compared = taken = 0
    for s, src in enumerate(srcs):
        ids, logits = ct.decode.greedy_decode(model, np.array([src]), None, max_len, START, end, return_logits=True)
        row = padded_row(results[s][0], max_len, model.config.trg_pad_idx, end)
        c, t = assert_same_greedy_ids(ids, logits, row[None], what=f"source {s}")
        compared, taken = compared + c, taken + t
    assert compared >= 0.9 * taken
    ended = sum(len(results[s][0]) < max_len - 1 for s in range(len(srcs)))
    assert 0 < ended < len(srcs), "some requests should end early and some run to max_len (mixed batches)"


def test_float32_requests_in_lanes_equal_each_decoded_alone(num_threads):
    """Float32 in lanes (40 requests at once on 2 threads, one batch a thread, the packed weights shared): every
    request's ids equal greedy_decode of its source alone along its path's clear steps (GREEDY_MARGIN), through the
    split into lanes and the merge back. lane_rows=1 forces the split: a beam of 2 leads, and its 2 rows split the
    batch in the turn that sees it."""
    model = post_norm_model("prj-tied", seed=3)
    srcs, max_len = sources(model, 40, seed=3), 24
    end = end_symbol(model, srcs, max_len)
    num_threads(2)
    if ct.get_num_threads() != 2:
        pytest.skip(f"the pool runs {ct.get_num_threads()} threads, not 2")
    engine = ct._core.serve.Engine(max_queue=64, max_rows=48, max_batch_tokens=1024, lane_rows=1)
    engine.add_model("m", model, START, end)
    leader = engine.submit("m", srcs[0], SequenceOptions(max_len=max_len, beam_size=2))
    source_of = {engine.submit("m", src, SequenceOptions(max_len=max_len)): s for s, src in enumerate(srcs)}
    results = {}
    deadline = time.monotonic() + HANG
    while len(results) < len(srcs) + 1 and time.monotonic() < deadline:
        for event in engine.poll(0.05):
            assert event.kind in ("token", "finished"), (event.kind, event.message)
            if event.kind == "finished":
                results[source_of.get(event.request, "leader")] = event.ids
    stats = engine.stats()
    engine.stop()
    assert len(results) == len(srcs) + 1, f"{len(results)} of {len(srcs) + 1} requests ended in {HANG} s"
    assert stats["lane_runs_total"] >= 1 and engine.stats()["lanes"] == 1 and leader is not None
    alone = [ct.decode.greedy_decode(model, np.array([src]), None, max_len, START, end, return_logits=True)
             for src in srcs]   # each source alone; compared together (90% of all their steps)
    rows = np.stack([padded_row(results[s], max_len, model.config.trg_pad_idx, end) for s in range(len(srcs))])
    assert_same_greedy_ids(np.concatenate([a[0] for a in alone]), np.concatenate([a[1] for a in alone]), rows,
                           what="lanes")


@pytest.mark.parametrize("variant", ["prj-tied", "asymmetric"])
def test_int8_requests_are_bit_for_bit_each_decoded_alone(variant):
    """int8: greedy and beam requests, mixed arrivals and a cancellation, equal their sources decoded alone exactly
    (ids and beam scores): the products are exact, the rest is computed row by row as for one source."""
    model = ct.quantize_dynamic(post_norm_model(variant, seed=3))
    srcs, max_len = sources(model, 12, seed=2), 12
    end = end_symbol(model, srcs, max_len)
    pad = model.config.trg_pad_idx
    for beam_size in (1, 3):
        results, _ = run_engine(model, srcs, max_len, end, beam_size=beam_size, cancel={5})
        assert 5 not in results or len(results) == len(srcs)
        for s, src in enumerate(srcs):
            if s not in results:
                continue
            if beam_size == 1:
                ids = ct.decode.greedy_decode(model, np.array([src]), None, max_len, START, end)
                np.testing.assert_array_equal(padded_row(results[s][0], max_len, pad, end), ids[0])
            else:
                ids, score = ct.decode.beam_search(model, np.array([src]), None, max_len, START, end,
                                                   beam_size=beam_size)
                np.testing.assert_array_equal(padded_row(results[s][0], max_len, pad, end), ids[0])
                assert results[s][1] == score[0]


def test_beam_requests_equal_each_searched_alone():
    """Float32 beam search: each request equals beam_search of its source alone where every decision of its
    traced search clears BEAM_MARGIN (the others may legally differ); scores within SCORE_TOL."""
    model = post_norm_model("untied", seed=2)
    srcs, max_len, beam = sources(model, 10, seed=3), 12, 3
    end = end_symbol(model, srcs, max_len)
    results, _ = run_engine(model, srcs, max_len, end, beam_size=beam, max_rows=9)
    compared = 0
    for s, src in enumerate(srcs):
        hyps, gaps, _ = traced_beam_search(model, np.array([src]), None, max_len, START, end, beam, 0.6, 1)
        if gaps[0] < BEAM_MARGIN:
            continue
        ids, score = ct.decode.beam_search(model, np.array([src]), None, max_len, START, end, beam_size=beam)
        np.testing.assert_array_equal(padded_row(results[s][0], max_len, model.config.trg_pad_idx, end), ids[0],
                                      err_msg=f"source {s}")
        assert abs(results[s][1] - score[0]) <= SCORE_TOL
        compared += 1
    assert compared >= 7, f"only {compared} of {len(srcs)} searches clear BEAM_MARGIN"


def test_engine_refuses_bad_requests_by_name():
    model = post_norm_model("prj-tied")
    engine = ct._core.serve.Engine(max_queue=2, max_rows=4, max_batch_tokens=32)
    engine.add_model("m", model, START, 3)
    with pytest.raises(ValueError, match="no model named 'x'"):
        engine.submit("x", [5, SOURCE_END], SequenceOptions(max_len=5))
    with pytest.raises(IndexError, match="src"):
        engine.submit("m", [VOCAB, SOURCE_END], SequenceOptions(max_len=5))
    with pytest.raises(ValueError, match="empty"):
        engine.submit("m", [], SequenceOptions(max_len=5))
    with pytest.raises(ValueError, match="max_len"):
        engine.submit("m", [5, SOURCE_END], SequenceOptions(max_len=10**6))
    with pytest.raises(ValueError, match="beam_size"):
        engine.submit("m", [5, SOURCE_END], SequenceOptions(max_len=5, beam_size=5))
    with pytest.raises(ValueError, match="max_batch_tokens"):
        engine.submit("m", [5] * 40 + [SOURCE_END], SequenceOptions(max_len=5))
    with pytest.raises(ValueError, match="beam_size"):
        engine.submit("m", [5, SOURCE_END], SequenceOptions(max_len=5, beam_size=2**64))
    for generation_only in (dict(logprobs=True), dict(presence_penalty=0.5), dict(logit_bias={5: 1.0})):
        with pytest.raises(ValueError, match="a generation's options"):
            engine.submit("m", [5, SOURCE_END], SequenceOptions(max_len=5, **generation_only))
    with pytest.raises(ValueError, match="served already"):
        engine.add_model("m", model, START, 3)
    engine.stop()
    with pytest.raises(RuntimeError, match="stopped"):
        engine.submit("m", [5, SOURCE_END], SequenceOptions(max_len=5))


def test_a_full_queue_refuses_and_stop_cancels_what_is_left():
    model = post_norm_model("prj-tied")
    engine = ct._core.serve.Engine(max_queue=2, max_rows=1, max_batch_tokens=64)
    engine.add_model("m", model, START, 3)
    engine.stop()   # nothing is admitted: the queue fills
    engine = ct._core.serve.Engine(max_queue=2, max_rows=1, max_batch_tokens=64)
    engine.add_model("m", model, START, 3)
    ids, refused = [], 0
    for _ in range(20):
        try:
            ids.append(engine.submit("m", [5, 6, SOURCE_END], SequenceOptions(max_len=40)))
        except ct._core.serve.QueueFull as error:
            assert "queue is full" in str(error)
            refused += 1
    assert refused > 0 and engine.stats()["rejected_total"] == refused
    engine.stop()
    kinds = {}
    for event in engine.poll(0.5):
        kinds.setdefault(event.request, []).append(event.kind)
    assert all(kinds.get(r, ["?"])[-1] in ("finished", "cancelled") for r in ids), kinds


def test_timeouts_and_cancellations_free_their_rows():
    model = post_norm_model("prj-tied")
    engine = ct._core.serve.Engine(max_queue=16, max_rows=2, max_batch_tokens=64)
    engine.add_model("m", model, START, 3)
    slow = engine.submit("m", [5, 6, SOURCE_END], SequenceOptions(max_len=200), timeout=0.001)
    kept = engine.submit("m", [7, 8, SOURCE_END], SequenceOptions(max_len=200))
    assert engine.cancel(kept)
    done = {}
    deadline = time.monotonic() + HANG
    while len(done) < 2 and time.monotonic() < deadline:
        for event in engine.poll(0.05):
            if event.kind != "token":
                done[event.request] = event.kind
    assert done == {slow: "timed_out", kept: "cancelled"}
    assert engine.stats()["rows_in_use"] == 0 and not engine.cancel(kept)
    engine.stop()


def test_each_request_leaves_by_its_own_deadline():
    """Deadlines come in any order and the soonest goes first: requests with a 1 ms timeout leave (timed out, or
    finished had they been that quick), those with a minute's finish, every one with exactly one final event."""
    model = post_norm_model("prj-tied")
    engine = ct._core.serve.Engine(max_queue=64, max_rows=2, max_batch_tokens=64)
    engine.add_model("m", model, START, 3)
    short, long_ = [], []
    for i in range(12):   # the short ones last: their deadlines come first all the same
        timeout = 0.001 if i >= 8 else 60.0
        # a long one decodes to max_len (this model's ends come late): the short ones wait hundreds of steps
        request = engine.submit("m", [5 + i % 4, 6, SOURCE_END], SequenceOptions(max_len=100), timeout=timeout)
        (short if timeout < 1 else long_).append(request)
    final = {}
    deadline = time.monotonic() + HANG
    while len(final) < 12 and time.monotonic() < deadline:
        for event in engine.poll(0.05):
            if event.kind != "token":
                assert event.request not in final, f"a second final event for {event.request}: {event.kind}"
                final[event.request] = event.kind
    assert all(final.get(r) == "finished" for r in long_), final
    assert all(final.get(r) in ("timed_out", "finished") for r in short), final
    stats = engine.stats()
    assert stats["timed_out_total"] == sum(final[r] == "timed_out" for r in short) > 0
    assert stats["rows_in_use"] == 0 and stats["queue_depth"] == 0
    engine.stop()


def test_poll_releases_the_gil():
    """poll() waits with the GIL released: another Python thread runs meanwhile (helpers.assert_releases_gil)."""
    from helpers import assert_releases_gil

    engine = ct._core.serve.Engine()
    assert_releases_gil(lambda: engine.poll(0.1))
    engine.stop()


@pytest.mark.parametrize("early_stopping", [False, True, "never"])
def test_int8_marian_beams_search_as_transformers_rules_alone(early_stopping):
    """A Marian model's requests with transformers' beam rules (search "hf": the pad banned, eos forced at the
    last position, its length penalty and early stopping), int8, mixed arrivals: each equals hf_beam_search of its
    source alone bit for bit (ids and float32 score): one search step (decode/hf_beam.hpp) serves both."""
    from reference.marian_pairs import marian_pair
    from test_marian_generate import lively

    _, model, pad = lively(*marian_pair(), eos_bias=2.0)
    model = ct.quantize_dynamic(model)
    rng = np.random.default_rng(5)
    srcs = [list(rng.integers(1, pad - 1, int(rng.integers(2, 9)))) + [0] for _ in range(9)]
    max_len, beams = 12, 4
    engine = ct._core.serve.Engine(max_queue=16, max_rows=8, max_batch_tokens=64)
    engine.add_model("m", model, pad, 0, banned=[pad], force_end=True)
    ids_of, results = {}, {}
    for wave in (srcs[:3], srcs[3:6], srcs[6:]):
        for src in wave:
            ids_of[engine.submit("m", src, SequenceOptions(
                max_len=max_len, beam_size=beams, alpha=0.6, search="hf", early_stopping=early_stopping))] = len(ids_of)
        for event in engine.poll(0.02):
            if event.kind == "finished":
                results[ids_of[event.request]] = (event.ids, event.score)
    deadline = time.monotonic() + HANG
    while len(results) < len(srcs) and time.monotonic() < deadline:
        for event in engine.poll(0.05):
            assert event.kind in ("token", "finished"), event.message
            if event.kind == "finished":
                results[ids_of[event.request]] = (event.ids, event.score)
    engine.stop()
    ended = 0
    for s, src in enumerate(srcs):
        ids, score = ct.decode.hf_beam_search(model, np.array([src]), None, max_len, pad, 0, num_beams=beams,
                                              length_penalty=0.6, early_stopping=early_stopping, banned=[pad],
                                              force_end=True)
        np.testing.assert_array_equal(padded_row(results[s][0], max_len, pad, 0, start=pad), ids[0])
        assert results[s][1] == score[0]
        ended += len(results[s][0]) < max_len - 2
    assert 0 < ended, "some searches should end before the length limit"



def finished_events(engine, submitted):
    """The finished event of each submitted request id, polled until all have ended."""
    done, deadline = {}, time.monotonic() + HANG
    while len(done) < len(submitted) and time.monotonic() < deadline:
        for event in engine.poll(0.05):
            assert event.kind in ("token", "finished"), event.message
            if event.kind == "finished":
                done[event.request] = event
    assert len(done) == len(submitted), f"{len(done)} of {len(submitted)} requests ended in {HANG} s"
    return [done[r] for r in submitted]


@pytest.mark.parametrize("search", ["gnmt", "hf"])
def test_int8_n_best_equals_each_search_alone(search):
    """A beam's n best (n_best 3 of a beam of 4), int8, requests batched together: the translation and its two
    alternatives, ids and scores, equal beam_search (GNMT's rules) or hf_beam_search (transformers') of that source
    alone with n_best=3, bit for bit (the int8 products are exact; the rest is row by row)."""
    model = ct.quantize_dynamic(post_norm_model("prj-tied", seed=3))
    srcs, max_len, pad = sources(model, 8, seed=4), 12, model.config.trg_pad_idx
    end = end_symbol(model, srcs, max_len)
    engine = ct._core.serve.Engine(max_queue=16, max_rows=16, max_batch_tokens=256)
    engine.add_model("m", model, START, end)
    submitted = [engine.submit("m", src, SequenceOptions(max_len=max_len, beam_size=4, n_best=3, search=search),
                               tokens=False) for src in srcs]
    events = finished_events(engine, submitted)
    engine.stop()
    for src, event in zip(srcs, events):
        if search == "gnmt":
            ids, scores = ct.decode.beam_search(model, np.array([src]), None, max_len, START, end, beam_size=4,
                                                n_best=3)
        else:
            ids, scores = ct.decode.hf_beam_search(model, np.array([src]), None, max_len, START, end, num_beams=4,
                                                   length_penalty=0.6, n_best=3)
        got = [event.ids, *event.alternatives]
        assert len(got) == 3 and len(event.alternative_scores) == 2
        for k in range(3):
            np.testing.assert_array_equal(padded_row(got[k], max_len, pad, end), ids[0, k], err_msg=f"hypothesis {k}")
        assert [event.score, *event.alternative_scores] == list(scores[0])
    engine = ct._core.serve.Engine()
    engine.add_model("m", model, START, end)
    with pytest.raises(ValueError, match="n_best must be between 1 and beam_size = 2, got 3"):
        engine.submit("m", srcs[0], SequenceOptions(max_len=max_len, beam_size=2, n_best=3))
    engine.stop()
