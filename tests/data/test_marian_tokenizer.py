"""ctransformer.data.MarianTokenizer against transformers.MarianTokenizer on the same files.

The files are written here (tests/marian_dirs.py: sentencepiece models trained on Multi30k, vocab.json as
opus-mt's conversion lays it out), shared and separate vocabularies. On 300 validation sentences of each side,
plus sentences with what a tokenizer trips on (special tokens written in the text, a language code, unknown
characters, empty text), the ids are equal, and the text decoded from the ids is equal, with and without
the special tokens. Nothing here is a float: equality is exact.
"""
import pytest

from ctransformer.data.marian_tokenizer import MarianTokenizer
from ctransformer.data.parallel_corpus import multi30k
from marian_dirs import write_tokenizer

transformers = pytest.importorskip("transformers")

ODD = ["", "   ", "Ein Hund </s> rennt.", "<unk> und <pad>", ">>deu<< Ein Mann fährt Fahrrad.", "Ça coûte 5€ — ☃ 𝄞!",
       "A  double  space", "ends with a space ", "Tab\there", "ÄÖÜ äöü ß"]


@pytest.fixture(scope="module", params=[False, True], ids=["shared", "separate"])
def tokenizers(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("marian_tok")
    write_tokenizer(str(path), separate=request.param, language_codes=[">>deu<<", ">>fra<<"])
    theirs = transformers.MarianTokenizer(source_spm=str(path / "source.spm"), target_spm=str(path / "target.spm"),
                                          vocab=str(path / "vocab.json"), separate_vocabs=request.param,
                                          target_vocab_file=str(path / "target_vocab.json") if request.param else None)
    return MarianTokenizer(str(path)), theirs


def test_source_ids_equal_transformers(tokenizers):
    ours, theirs = tokenizers
    sentences = multi30k("val").src[:300] + ODD
    assert ours.encode(sentences) == [theirs(s)["input_ids"] for s in sentences]


def test_target_ids_equal_transformers(tokenizers):
    ours, theirs = tokenizers
    sentences = multi30k("val").tgt[:300] + ODD
    assert ours.encode(sentences, target=True) == [theirs(text_target=s)["input_ids"] for s in sentences]


@pytest.mark.parametrize("skip", [True, False])
def test_text_back_equals_transformers(tokenizers, skip):
    ours, theirs = tokenizers
    ids = ours.encode(multi30k("val").tgt[:300] + ODD, target=True)
    assert ours.decode(ids, skip_special_tokens=skip) == [theirs.decode(i, skip_special_tokens=skip) for i in ids]
    # An id outside every vocabulary is <unk> here (transformers raises sentencepiece's IndexError).
    assert ours.decode([[999_999]], skip_special_tokens=False) == ["<unk>"]


def test_special_ids(tokenizers):
    ours, theirs = tokenizers
    assert (ours.eos_id, ours.unk_id, ours.pad_id) == (theirs.eos_token_id, theirs.unk_token_id, theirs.pad_token_id)


def test_bad_input_raises(tmp_path, tokenizers):
    ours, _ = tokenizers
    with pytest.raises(TypeError, match="list of sentences"):
        ours.encode("one sentence")
    with pytest.raises(TypeError, match="expected a str"):
        ours.encode([3])
    with pytest.raises(FileNotFoundError, match="source.spm, target.spm"):
        MarianTokenizer(str(tmp_path))
