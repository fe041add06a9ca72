"""Issue 12: real translation — corpus reading, subwords, token batches, the multi30k task, translate CLI.

Everything here is small and fast (tiny models, a few hundred subwords, a few hundred pairs); the
hour-long Multi30k run and its BLEU are a script's business (README, "Translating Multi30k").
"""
import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import ctransformer as ct
from ctransformer.data.parallel_corpus import CorpusError, multi30k, read_lines, read_parallel
from ctransformer.data.subword import BOS_ID, EOS_ID, PAD_ID, UNK_ID, SubwordVocab, cached_subword_vocab, \
    train_subword_vocab
from ctransformer.data.token_batches import TokenBatcher, make_arrays


# --- corpus reader ------------------------------------------------------------------------------------

def _write(path, lines, gz=False):
    data = ("\n".join(lines) + "\n").encode("utf-8")
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return str(path)


def test_reader_reads_plain_and_gzipped_alike(tmp_path):
    lines = ["Ein Hund läuft.", "  Zwei Männer  ", "Straße"]
    plain = _write(tmp_path / "a.txt", lines)
    packed = _write(tmp_path / "a.txt.gz", lines, gz=True)
    renamed = tmp_path / "b.txt"        # gzip told by its bytes, not its name
    renamed.write_bytes((tmp_path / "a.txt.gz").read_bytes())
    expected = ["Ein Hund läuft.", "Zwei Männer", "Straße"]
    assert read_lines(plain) == read_lines(packed) == read_lines(renamed) == expected


def test_reader_names_both_files_when_counts_differ(tmp_path):
    src = _write(tmp_path / "s.de", ["a", "b", "c"])
    tgt = _write(tmp_path / "t.en", ["a", "b"])
    with pytest.raises(CorpusError, match=r"s\.de has 3 lines but .*t\.en has 2"):
        read_parallel(src, tgt)


def test_reader_errors_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        read_lines(tmp_path / "nope")
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("Stra\xdfe\n".encode("latin-1"))
    with pytest.raises(CorpusError, match="not UTF-8"):
        read_lines(bad)
    cut = tmp_path / "cut.gz"
    _write(cut, ["x" * 1000] * 50, gz=True)
    cut.write_bytes(cut.read_bytes()[:40])
    with pytest.raises(CorpusError, match="cannot be read"):
        read_lines(cut)


def test_multi30k_splits_have_their_documented_sizes():
    sizes = {"train": 29000, "val": 1014, "test2016": 1000}
    for split, n in sizes.items():
        corpus = multi30k(split)
        assert len(corpus) == n and len(corpus.tgt) == n
    first = multi30k("train")
    assert first.src[0] == "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche."
    assert first.tgt[0] == "Two young, White males are outside near many bushes."


# --- subword vocabulary ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_corpus():
    train = multi30k("train")
    return train.src[:400], train.tgt[:400]


@pytest.fixture(scope="module")
def small_vocab(small_corpus):
    src, tgt = small_corpus
    return train_subword_vocab(src + tgt, vocab_size=300)


def test_vocab_special_ids_are_the_models(small_vocab):
    assert (small_vocab.pad_id, small_vocab.unk_id, small_vocab.bos_id, small_vocab.eos_id) == (0, 1, 2, 3)
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    p = small_vocab.processor
    assert [p.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert len(small_vocab) == 300
    ids = small_vocab.encode("Ein Hund.")
    assert min(ids) >= 4       # ordinary text never encodes to a special id
    assert small_vocab.decode([BOS_ID] + ids + [EOS_ID, PAD_ID, PAD_ID]) == "Ein Hund."


def test_vocab_round_trips_the_german_test_set():
    """The full Multi30k recipe (joint BPE of 8000 on train de+en): test2016.de comes back unchanged."""
    train = multi30k("train")
    vocab = train_subword_vocab(train.src + train.tgt, vocab_size=8000)
    test = multi30k("test2016").src
    differences = [(s, vocab.decode(vocab.encode(s))) for s in test if vocab.decode(vocab.encode(s)) != s]
    assert differences == []
    assert UNK_ID not in {i for s in test for i in vocab.encode(s)}  # every test character was seen in training


def test_vocab_names_what_it_cannot_round_trip(small_vocab):
    # A character absent from the training text becomes <unk>: the loss is visible, not silent.
    ids = small_vocab.encode("Ein Hund ☃.")
    assert UNK_ID in ids and small_vocab.decode(ids) != "Ein Hund ☃."


def test_vocab_travels_as_bytes_and_is_cached(tmp_path, small_corpus, small_vocab):
    again = SubwordVocab.from_array(small_vocab.as_array())
    assert again.model_bytes == small_vocab.model_bytes
    src, tgt = small_corpus
    path = str(tmp_path / "run.spm.model")
    first = cached_subword_vocab(src + tgt, path, vocab_size=300)
    mtime = os.stat(path).st_mtime_ns
    second = cached_subword_vocab(src + tgt, path, vocab_size=300)
    assert os.stat(path).st_mtime_ns == mtime and first.model_bytes == second.model_bytes
    assert first.model_bytes == small_vocab.model_bytes          # one thread: the same text gives the same model
    third = cached_subword_vocab(src + tgt, path, vocab_size=200)  # other options: retrained, not reused
    assert len(third) == 200


def test_vocab_bad_input():
    with pytest.raises(ValueError, match="model_type"):
        train_subword_vocab(["a b"], model_type="word")
    with pytest.raises(ValueError, match="vocab_size"):
        train_subword_vocab(["a b"], vocab_size=2)
    with pytest.raises(TypeError, match="bytes"):
        SubwordVocab("not bytes")


# --- token batches ---------------------------------------------------------------------------------------

def _random_pairs(n, seed=0):
    rng = np.random.default_rng(seed)
    src = [list(rng.integers(4, 50, rng.integers(1, 30))) for _ in range(n)]
    tgt = [list(rng.integers(4, 50, rng.integers(1, 30))) for _ in range(n)]
    return src, tgt


def test_every_pair_once_per_epoch_within_the_token_bound():
    src, tgt = _random_pairs(500)
    batcher = TokenBatcher(src, tgt, batch_tokens=200, seed=3)
    for epoch in range(3):
        batches = batcher.epoch(epoch)
        assert len(batches) == len(batcher)
        seen = np.sort(np.concatenate(batches))
        np.testing.assert_array_equal(seen, np.arange(500))
        for b in batches:
            s, t = batcher.arrays(b)
            assert len(b) * max(s.shape[1], t.shape[1] - 1) <= 200
            # full: one more pair of the batch's length would not have fitted (or the length ran out)
    assert batcher.epoch(0) is not None
    e0, e1 = batcher.epoch(0), TokenBatcher(src, tgt, 200, seed=3).epoch(1)
    assert any(not np.array_equal(a, b) for a, b in zip(e0, e1))   # reshuffled every epoch


def test_batches_are_full_and_padding_is_low():
    src, tgt = _random_pairs(2000, seed=1)
    batcher = TokenBatcher(src, tgt, batch_tokens=300, seed=0)
    key = batcher.key
    sizes = [len(b) * int(key[b].max()) for b in batcher.epoch(0)]
    assert np.mean(sizes) > 0.9 * 300, np.mean(sizes)
    # Sorting by the longer side leaves only the gap between the two sides' lengths, and within-batch
    # spread of the shorter side, as padding: far below the ~50% of random batches of this data.
    assert batcher.padding_fraction(0) < 0.35
    rng = np.random.default_rng(0)
    random_batches = np.array_split(rng.permutation(2000), len(batcher))
    slots = sum(len(b) * (batcher.src_len[b].max() + batcher.tgt_len[b].max()) for b in random_batches)
    real = batcher.src_len.sum() + batcher.tgt_len.sum()
    assert batcher.padding_fraction(0) < 1 - real / slots


def test_same_seed_same_batches_other_seed_others():
    src, tgt = _random_pairs(300)
    a = TokenBatcher(src, tgt, 150, seed=7)
    b = TokenBatcher(src, tgt, 150, seed=7)
    c = TokenBatcher(src, tgt, 150, seed=8)
    for epoch in (0, 4):
        assert all(np.array_equal(x, y) for x, y in zip(a.epoch(epoch), b.epoch(epoch)))
    assert not all(np.array_equal(x, y) for x, y in zip(a.epoch(0), c.epoch(0)))
    epoch, index, batch = a.at_step(len(a) + 2)
    assert (epoch, index) == (1, 2) and np.array_equal(batch, a.epoch(1)[2])


def test_arrays_add_the_specials():
    src, tgt = make_arrays([[5, 6, 7], [8]], [[9], [10, 11]])
    np.testing.assert_array_equal(src, [[5, 6, 7, EOS_ID], [8, EOS_ID, PAD_ID, PAD_ID]])
    np.testing.assert_array_equal(tgt, [[BOS_ID, 9, EOS_ID, PAD_ID], [BOS_ID, 10, 11, EOS_ID]])


def test_batcher_bad_input():
    src, tgt = _random_pairs(10)
    with pytest.raises(ValueError, match="batch_tokens=5 is below"):
        TokenBatcher(src, tgt, 5, seed=0)
    with pytest.raises(ValueError, match="9 targets"):
        TokenBatcher(src, tgt[:9], 100, seed=0)
