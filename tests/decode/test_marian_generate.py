"""Greedy decoding of a Marian model against Hugging Face's ``generate`` (num_beams=1), token for token.

Random MarianMTModels (tests/nn/test_marian.py's marian_pair) decode a padded batch with Marian's rules: the
decoder starts on the pad id, the pad id is never chosen (bad_words_ids), and a row that reaches max_length
ends with eos (forced_eos_token_id). Both pick the first maximum of the logits; where two logits of a step are
within KNIFE of each other, a legal change of summation order could pick the other, so each row is compared up
to its first such step (the tokens before it must be equal; the test also requires that most of the tokens
were compared, so it cannot pass by comparing nothing).
"""
import numpy as np
import pytest
import torch

import ctransformer as ct
from reference.marian_pairs import batch, marian_pair

transformers = pytest.importorskip("transformers")

KNIFE = 1e-4   # logits here are O(1); the two libraries' float32 logits differ by ~1e-6 (test_marian.py)


def lively(hf, ours, pad, eos_bias):
    """Weights of std 0.3 and a small logits bias: at HF's init (std 0.02) the random logits bias decides every
    step and each row repeats one token. eos_bias makes eos likelier, so rows end at different steps."""
    with torch.no_grad():
        for p in hf.parameters():
            if p.dim() > 1 and p.requires_grad:
                p.normal_(0, 0.3)
        hf.final_logits_bias.mul_(0.1)
        hf.final_logits_bias[0, 0] += eos_bias
        hf.final_logits_bias[0, pad] += 2.5   # pad would win some steps: the ban must be applied
    ours.load_state_dict({k: v.numpy() for k, v in hf.state_dict().items()})
    return hf, ours, pad


def hf_greedy(hf, src, pad, max_length):
    out = hf.generate(input_ids=torch.tensor(src), attention_mask=torch.tensor(src != pad), num_beams=1,
                      do_sample=False, max_length=max_length, bad_words_ids=[[pad]], forced_eos_token_id=0,
                      decoder_start_token_id=pad, eos_token_id=0, pad_token_id=pad, output_scores=True,
                      return_dict_in_generate=True, output_logits=True)
    return out.sequences.numpy(), torch.stack(out.logits, 1).numpy()   # raw logits (b, steps, V)


@pytest.mark.parametrize("options", [dict(share=True, tie=True, activation="swish"),
                                     dict(share=False, tie=False, activation="gelu"),
                                     dict(share=True, tie=True, activation="swish", asymmetric=True)],
                         ids=["shared-swish", "separate-gelu", "asymmetric"])
@pytest.mark.parametrize("eos_bias", [0.0, 2.0], ids=["long", "ending"])
def test_greedy_equals_generate(options, eos_bias):
    hf, ours, pad = lively(*marian_pair(**options), eos_bias)
    src, _, _ = batch(hf.config.vocab_size, hf.config.decoder_vocab_size, pad)
    max_length = 12
    with torch.no_grad():
        expected, logits = hf_greedy(hf, src, pad, max_length)
    got = ct.decode.greedy_decode(ours, src, ct.nn.get_pad_mask(src, pad), max_length, pad, 0, banned=[pad],
                                  force_end=True)
    compared = total = 0
    for r in range(src.shape[0]):
        row = expected[r]
        end = int(np.flatnonzero(row[1:] == 0)[0]) + 2 if (row[1:] == 0).any() else len(row)
        total += end - 1
        for t in range(1, end):
            step = logits[r, t - 1].copy()
            step[pad] = -np.inf
            top2 = np.sort(step)[-2:]
            if t + 1 < max_length and top2[1] - top2[0] < KNIFE:
                break                                  # a knife edge: the rest of the row may legally differ
            assert got[r, t] == row[t], f"row {r}, step {t}: {got[r, :end]} vs {row[:end]}"
            compared += 1
        else:
            assert (got[r, end:] == pad).all()
    assert compared >= 0.8 * total, f"only {compared} of {total} tokens were off the knife edge"


def test_banned_and_forced_end():
    hf, ours, pad = marian_pair()
    src, _, _ = batch(50, 50, pad)
    mask = ct.nn.get_pad_mask(src, pad)
    with ct.no_grad():
        ids, logits = ct.decode.greedy_decode(ours, src, mask, 6, pad, 0, return_logits=True)
    top = np.argsort(logits[0, 0])[::-1]
    banned = [int(top[0])]
    out = ct.decode.greedy_decode(ours, src, mask, 6, pad, 0, banned=banned, force_end=True)
    assert out[0, 1] == top[1] if top[1] != 0 else True   # the best allowed id
    assert not np.isin(out[:, 1:], banned).any()
    assert ((out == 0).any(axis=1)).all()                 # every row ends with eos, forced at the last position
    with pytest.raises(ValueError, match="outside the target vocabulary"):
        ct.decode.greedy_decode(ours, src, mask, 6, pad, 0, banned=[50])
    with pytest.raises(ValueError, match="force_end needs an end_symbol"):
        ct.decode.greedy_decode(ours, src, mask, 6, pad, None, force_end=True)


def test_beam_search_keeps_the_rules():
    """Beam search bans the same ids and forces the same end: at beam 1 it is greedy decoding under the rules,
    and at beam 4 no hypothesis holds a banned id and every one ends with eos."""
    hf, ours, pad = lively(*marian_pair(share=False, tie=False, activation="gelu"), 0.0)
    src, _, _ = batch(hf.config.vocab_size, hf.config.decoder_vocab_size, pad)
    mask = ct.nn.get_pad_mask(src, pad)
    greedy = ct.decode.greedy_decode(ours, src, mask, 10, pad, 0, banned=[pad], force_end=True)
    beam1, _ = ct.decode.beam_search(ours, src, mask, 10, pad, 0, beam_size=1, banned=[pad], force_end=True)
    assert np.array_equal(beam1, greedy)
    ids, scores = ct.decode.beam_search(ours, src, mask, 10, pad, 0, beam_size=4, n_best=4, banned=[pad],
                                        force_end=True)
    assert np.isfinite(scores).all()
    for hyp in ids.reshape(-1, ids.shape[-1]):
        body = hyp[1:]
        end = int(np.flatnonzero(body == 0)[0])            # every hypothesis ends with eos
        assert not (body[:end] == pad).any() and (body[end + 1:] == pad).all()
    unbanned, _ = ct.decode.beam_search(ours, src, mask, 10, pad, 0, beam_size=1)
    assert not np.array_equal(unbanned, beam1)             # the rules change something here
    with pytest.raises(TypeError, match="banned must be a list"):
        ct.decode.beam_search(ours, src, mask, 10, pad, 0, banned=1.5)


@pytest.mark.parametrize("options", [dict(), dict(share=False, tie=False, activation="gelu"),
                                     dict(share=False, tie=False, activation="gelu", asymmetric=True)],
                         ids=["shared-swish", "separate-gelu", "asymmetric"])
@pytest.mark.parametrize("eos_bias", [0.0, 2.0], ids=["long", "ending"])
@pytest.mark.parametrize("length_penalty,early_stopping", [(1.0, False), (0.6, False), (1.0, True), (2.0, "never")])
def test_hf_beam_search_equals_generate(options, eos_bias, length_penalty, early_stopping):
    """hf_beam_search against generate(num_beams=4) with Marian's rules: the same best hypothesis and its score
    (rtol 1e-5: float32 sums of a few log-probabilities computed by two libraries). A row may differ only where
    Hugging Face's own best two finished hypotheses lie within KNIFE of each other (a tie that float32 rounding
    decides), and then ours must be one of them; and at least all rows but one must be equal, so the test
    cannot pass by explaining every row away (as measured, every row of these models is equal)."""
    hf, ours, pad = lively(*marian_pair(**options), eos_bias)
    src, _, _ = batch(hf.config.vocab_size, hf.config.decoder_vocab_size, pad)
    with torch.no_grad():
        out = hf.generate(input_ids=torch.tensor(src), attention_mask=torch.tensor(src != pad), num_beams=4,
                          num_return_sequences=4, max_length=12, bad_words_ids=[[pad]], forced_eos_token_id=0,
                          decoder_start_token_id=pad, eos_token_id=0, pad_token_id=pad, length_penalty=length_penalty,
                          early_stopping=early_stopping, output_scores=True, return_dict_in_generate=True)
    theirs = out.sequences.numpy().reshape(src.shape[0], 4, -1)
    their_scores = out.sequences_scores.numpy().reshape(src.shape[0], 4)
    ids, scores = ct.decode.hf_beam_search(ours, src, ct.nn.get_pad_mask(src, pad), 12, pad, 0, num_beams=4,
                                           length_penalty=length_penalty, early_stopping=early_stopping,
                                           banned=[pad], force_end=True)
    width = theirs.shape[-1]
    equal = 0
    for r in range(src.shape[0]):
        assert (ids[r, width:] == pad).all()
        if np.array_equal(ids[r, :width], theirs[r, 0]):
            assert scores[r] == pytest.approx(their_scores[r, 0], rel=1e-5)
            equal += 1
            continue
        assert their_scores[r, 0] - their_scores[r, 1] < KNIFE, f"row {r}: {ids[r]} vs {theirs[r, 0]}"
        assert any(np.array_equal(ids[r, :width], t) for t in theirs[r, :2])
    assert equal >= src.shape[0] - 1


def test_hf_beam_search_arguments():
    _, ours, pad = marian_pair()
    src, _, _ = batch(50, 50, pad)
    mask = ct.nn.get_pad_mask(src, pad)
    ids, scores = ct.decode.hf_beam_search(ours, src, mask, 8, pad, 0, num_beams=3, n_best=2, banned=[pad])
    assert ids.shape == (3, 2, 8) and scores.shape == (3, 2) and (scores[:, 0] >= scores[:, 1]).all()
    for bad, match in ((dict(num_beams=0), "num_beams"), (dict(early_stopping="sometimes"), "early_stopping"),
                       (dict(n_best=5), "n_best")):
        with pytest.raises(ValueError, match=match):
            ct.decode.hf_beam_search(ours, src, mask, 8, pad, 0, **bad)
