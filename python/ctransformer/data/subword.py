"""A joint source+target subword vocabulary: a sentencepiece model whose special ids are the model's.

One model is trained on both sides of the training text (so source and target share one embedding
matrix, the post-norm Transformer's ``emb_src_trg_weight_sharing``), with pad / unk / bos / eos at the fixed ids
below. A model is kept as its serialized bytes (sentencepiece's ModelProto): that is what is cached
on disk and what a checkpoint carries, so a checkpoint translates without any other file.
"""
import hashlib
import io
import json
import os

import numpy as np

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3

MODEL_TYPES = ("bpe", "unigram")


def _spm():
    try:
        import sentencepiece
    except ImportError as error:   # a runtime dependency; say what to do if it was left out
        raise ImportError("ctransformer's subword vocabulary needs sentencepiece: pip install sentencepiece") from error
    return sentencepiece


class SubwordVocab:
    """A loaded sentencepiece model: ``encode(text) -> ids``, ``decode(ids) -> text`` (detokenised)."""

    pad_id, unk_id, bos_id, eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    def __init__(self, model_bytes: bytes):
        if not isinstance(model_bytes, (bytes, bytearray)) or not model_bytes:
            raise TypeError(f"SubwordVocab: expected the serialized sentencepiece model as bytes, got "
                            f"{type(model_bytes).__name__}")
        self.model_bytes = bytes(model_bytes)
        self.processor = _spm().SentencePieceProcessor(model_proto=self.model_bytes)
        found = (self.processor.pad_id(), self.processor.unk_id(), self.processor.bos_id(), self.processor.eos_id())
        if found != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise ValueError(f"SubwordVocab: the model's pad/unk/bos/eos ids are {found}, expected "
                             f"{(PAD_ID, UNK_ID, BOS_ID, EOS_ID)} (a model not trained by train_subword_vocab?)")

    def __len__(self):
        return self.processor.get_piece_size()

    def encode(self, text):
        """Ids of one sentence (a str) or of each of a list of sentences; no bos/eos added."""
        return self._encode(text, int)

    # sentencepiece encodes a list on threads it starts for that call: 0.25 ms before the first id (about 1 ms
    # with the cores busy decoding), where one sentence alone takes 0.01 ms. The server encodes one text per
    # request, and this was a quarter of its Python time; only a long list gains from the threads.
    _THREADED_FROM = 64

    def _encode(self, text, out_type):
        if isinstance(text, (list, tuple)) and len(text) < self._THREADED_FROM:
            return [self.processor.encode(t, out_type=out_type) for t in text]
        return self.processor.encode(text, out_type=out_type)

    def decode(self, ids):
        """Text of one id sequence; pad, bos and eos ids are dropped, the rest detokenised."""
        ids = [int(i) for i in ids if int(i) not in (PAD_ID, BOS_ID, EOS_ID)]
        return self.processor.decode(ids)

    def pieces(self, text):
        return self._encode(text, str)

    def as_array(self):
        """The model bytes as a uint8 array: how a checkpoint stores it (a tensor, not pickled code)."""
        return np.frombuffer(self.model_bytes, dtype=np.uint8).copy()

    @classmethod
    def from_array(cls, array):
        return cls(np.asarray(array, dtype=np.uint8).tobytes())

    @classmethod
    def load(cls, path):
        with open(path, "rb") as f:
            return cls(f.read())

    def save(self, path):
        """Write the .model file (readable by any sentencepiece) atomically."""
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(self.model_bytes)
        os.replace(tmp, path)


def train_subword_vocab(sentences, vocab_size=8000, model_type="bpe", character_coverage=1.0):
    """Train a sentencepiece model on `sentences` (both languages' lines) and return it as a SubwordVocab.

    One thread, so the same text and options give the same model bytes (BPE on Multi30k's 58000
    lines takes about a second). hard_vocab_limit is off so a small corpus gets a smaller vocabulary
    rather than an error; len(vocab) is the size reached.
    """
    if model_type not in MODEL_TYPES:
        raise ValueError(f"train_subword_vocab: model_type must be one of {MODEL_TYPES}, got {model_type!r}")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 8:
        raise ValueError(f"train_subword_vocab: vocab_size must be an int >= 8, got {vocab_size!r}")
    sentences = [s for s in sentences if s]
    if not sentences:
        raise ValueError("train_subword_vocab: no non-empty sentence to train on")
    model = io.BytesIO()
    try:
        _spm().SentencePieceTrainer.train(
            sentence_iterator=iter(sentences), model_writer=model, vocab_size=vocab_size, model_type=model_type,
            pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID, character_coverage=character_coverage,
            hard_vocab_limit=False, num_threads=1, minloglevel=2)
    except RuntimeError as error:
        raise ValueError(f"train_subword_vocab: sentencepiece could not train a {model_type} model of "
                         f"{vocab_size} pieces on {len(sentences)} sentences: {error}") from error
    return SubwordVocab(model.getvalue())


def training_key(sentences, **options):
    """A digest of the training text and options: the name a cached model is kept under."""
    h = hashlib.sha256()
    h.update(json.dumps({**options, "sentencepiece": _spm().__version__}, sort_keys=True).encode())
    for s in sentences:
        h.update(s.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()[:16]


def cached_subword_vocab(sentences, path, vocab_size=8000, model_type="bpe", log=None):
    """The model trained on `sentences` with these options, read from `path` if it is there, else trained
    and written there. A sidecar ``path + '.json'`` records the training key; a file whose key
    differs (other text or options) is retrained, not reused.
    """
    sentences = list(sentences)
    key = training_key(sentences, vocab_size=vocab_size, model_type=model_type)
    meta_path = f"{path}.json"
    if os.path.isfile(path) and os.path.isfile(meta_path):
        with open(meta_path) as f:
            if json.load(f).get("key") == key:
                return SubwordVocab.load(path)
    vocab = train_subword_vocab(sentences, vocab_size, model_type)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    vocab.save(path)
    with open(meta_path, "w") as f:
        json.dump({"key": key, "vocab_size": vocab_size, "model_type": model_type, "pieces": len(vocab),
                   "sentences": len(sentences)}, f)
    if log:
        log(f"trained a {model_type} sentencepiece model of {len(vocab)} pieces on {len(sentences)} lines -> {path}")
    return vocab
