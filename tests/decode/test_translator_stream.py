"""Translator.generate_tokens (a translation a token at a time) and Translator.translate_iterable (translations of a
stream, a read of batches at a time), on test_marian_translator's random opus-mt directory.

generate_tokens runs the decoder a step at a time on one sentence; greedy_decode runs the same model on the same
source, with the same banned pad and forced end, so the ids are compared along the steps whose two best logits are
KNIFE apart (another float32 route: greedy_decode reads packed weights), and the log-probabilities to 1e-5 of
greedy_decode's logits' log-softmax. The pieces of text join to translate([sentence], beam_size=1) exactly (the
same ids, decoded by the same tokenizer) wherever the ids agree.
"""
import numpy as np
import pytest

import ctransformer as ct
from ctransformer.data.token_batches import make_arrays
from ctransformer.translator import READ_BATCHES, Translator
from test_marian_generate import KNIFE
from test_marian_translator import SENTENCES, marian_dir  # noqa: F401 (a fixture)

pytest.importorskip("transformers")


def test_tokens_are_greedy_decodings_and_pieces_join_to_the_translation(marian_dir):  # noqa: F811
    path, _ = marian_dir
    translator = Translator.from_pretrained(path, beam_size=1, max_len_ratio=100.0)
    compared = whole = 0
    for sentence in SENTENCES:
        steps = list(translator.generate_tokens(sentence))
        assert [s.step for s in steps] == list(range(len(steps))) and steps[-1].is_last
        assert not any(s.is_last for s in steps[:-1]) and {s.batch_id for s in steps} == {0}
        src, _ = make_arrays(translator.encode([sentence]), None, pad=translator.pad_id, eos=translator.end_id)
        mask = ct.nn.get_pad_mask(src, translator.pad_id)
        ids, logits = ct.decode.greedy_decode(translator.model, src, mask, translator.max_len(src.shape[1]),
                                              translator.start_id, translator.end_id, banned=translator.banned,
                                              force_end=True, return_logits=True)
        agreed = True
        for t, step in enumerate(steps):
            row = logits[0, t].astype(np.float64)
            row[translator.pad_id] = -np.inf
            top2 = np.sort(row)[-2:]
            if t < len(steps) - 1 and top2[1] - top2[0] < KNIFE:
                agreed = False
                break
            assert step.token_id == ids[0, t + 1], f"{sentence!r}, step {t}"
            log_softmax = row - row.max() - np.log(np.exp(row - row.max()).sum())
            assert step.log_prob == pytest.approx(log_softmax[step.token_id], abs=1e-5)
            compared += 1
        if agreed:
            whole += 1
            assert "".join(s.text for s in steps) == translator.translate([sentence], beam_size=1)[0]
            for s in steps[:-1]:
                assert s.text == "" or not s.text.endswith(" ")   # a piece ends where a word does
    assert whole >= len(SENTENCES) - 1 and compared > 20


def test_closing_stops_and_bad_input_raises(marian_dir):  # noqa: F811
    path, _ = marian_dir
    translator = Translator.from_pretrained(path, beam_size=1)
    stream = translator.generate_tokens(SENTENCES[0])
    assert next(stream).step == 0
    stream.close()
    assert list(stream) == []
    assert list(translator.generate_tokens("   ")) == []
    short = list(translator.generate_tokens(SENTENCES[1], max_decoding_length=3))
    assert len(short) <= 3 and short[-1].token_id == translator.end_id   # the end forced at the limit
    with pytest.raises(TypeError, match="sentence must be a str"):
        next(translator.generate_tokens(["a list"]))


def test_translate_iterable_is_translate_of_each_read(marian_dir):  # noqa: F811
    path, _ = marian_dir
    translator = Translator.from_pretrained(path, beam_size=2, batch_size=2)
    pulled = []

    def lines():
        for sentence in SENTENCES:
            pulled.append(sentence)
            yield sentence

    assert len(SENTENCES) > 4   # more than one read of 2 batches of 2
    stream = translator.translate_iterable(lines(), read_batches=2)
    first = next(stream)
    assert len(pulled) == 4                                  # one read of 2 batches, not the whole stream
    # translate() of each read of 4 as it comes (sorted by length there; a batch's length limit follows its own
    # longest source)
    assert [first, *stream] == [t for i in range(0, len(SENTENCES), 4) for t in translator.translate(SENTENCES[i:i + 4])]
    pulled.clear()
    default = translator.translate_iterable(lines())
    first = next(default)
    assert len(SENTENCES) < READ_BATCHES * 2 and len(pulled) == len(SENTENCES)   # the default read: every sentence
    assert [first, *default] == translator.translate(SENTENCES)
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="read_batches must be an int >= 1"):
            next(translator.translate_iterable(SENTENCES, read_batches=bad))
    with pytest.raises(TypeError, match="one str"):
        next(translator.translate_iterable("a sentence"))
    with pytest.raises(TypeError, match="each sentence must be a str"):
        next(translator.translate_iterable([1, 2]))
