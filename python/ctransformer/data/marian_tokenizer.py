"""The opus-mt models' tokenizer: sentencepiece pieces mapped to ids through ``vocab.json`` (no ``transformers``).

A Marian directory holds ``source.spm`` and ``target.spm`` (sentencepiece models that cut text into pieces)
and ``vocab.json`` (piece -> id; the sentencepiece models' own ids are not used). A model with two vocabularies
(``tokenizer_config.json``: ``separate_vocabs``) has ``target_vocab.json`` too. It behaves as
``transformers.MarianTokenizer`` (tests/data/test_marian_tokenizer.py holds it to the same ids and text):
- encoding splits the text at the special tokens written in it (``</s>``, ``<unk>``, ``<pad>``), cuts every
  other part into pieces with the source (or, for targets, the target) model, maps each piece through the
  vocabulary (unknown pieces -> ``<unk>``; a special token takes its source-side id on either side, as
  transformers registers it once) and appends ``</s>``. A leading language code (``>>fra<<``, the
  multilingual models' target language) is kept as one token;
- decoding maps ids back to pieces (an id outside the vocabulary falls back to the sentencepiece model's piece),
  drops the special tokens when asked, joins the pieces with the sentencepiece model (the source one for a
  shared vocabulary, as transformers does), and applies transformers' clean-up of spaces before punctuation
  when ``tokenizer_config.json`` asks for it.
"""
import json
import os
import re

from .. import _arguments

UNK, EOS, PAD = "<unk>", "</s>", "<pad>"
SPIECE_UNDERLINE = "\u2581"
# transformers' clean_up_tokenization: spaces before these go.
_CLEAN_UP = [(" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
             (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")]


def _json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class MarianTokenizer:
    """``encode(sentences) -> id lists`` and ``decode(id lists) -> sentences`` for a Marian directory."""

    def __init__(self, path):
        from .subword import _spm

        path = _arguments.path(path, "MarianTokenizer: path")
        files = {name: os.path.join(path, name) for name in ("source.spm", "target.spm", "vocab.json")}
        missing = [name for name, file in files.items() if not os.path.isfile(file)]
        if missing:
            raise FileNotFoundError(f"MarianTokenizer: {path} has no {', '.join(missing)} (a Marian model directory "
                                    "holds source.spm, target.spm and vocab.json)")
        settings = {}
        if os.path.isfile(os.path.join(path, "tokenizer_config.json")):
            settings = _json(os.path.join(path, "tokenizer_config.json"))
        self.unk_token = settings.get("unk_token", UNK)
        self.eos_token = settings.get("eos_token", EOS)
        self.pad_token = settings.get("pad_token", PAD)
        self.separate_vocabs = bool(settings.get("separate_vocabs", False))
        self.clean_up_spaces = bool(settings.get("clean_up_tokenization_spaces", False))
        self.source_vocab = _json(files["vocab.json"])
        self.target_vocab = self.source_vocab
        if self.separate_vocabs:
            self.target_vocab = _json(os.path.join(path, settings.get("target_vocab_file") or "target_vocab.json"))
        for vocab in (self.source_vocab, self.target_vocab):
            if self.unk_token not in vocab:
                raise ValueError(f"MarianTokenizer: {path}'s vocabulary has no {self.unk_token!r}")
        self.target_pieces = {i: piece for piece, i in self.target_vocab.items()}
        self.source_pieces = {i: piece for piece, i in self.source_vocab.items()}
        spm = _spm()
        self.source_spm = spm.SentencePieceProcessor(model_file=files["source.spm"])
        self.target_spm = spm.SentencePieceProcessor(model_file=files["target.spm"])
        self.special_tokens = [t for t in (self.eos_token, self.unk_token, self.pad_token) if t]
        self._special = re.compile("(" + "|".join(re.escape(t) for t in
                                                  sorted(self.special_tokens, key=len, reverse=True)) + ")")
        # Special tokens take their source-side ids on both sides, as transformers registers them once.
        self._special_ids = {t: self.source_vocab[t] for t in self.special_tokens if t in self.source_vocab}
        self._special_pieces = {i: t for t, i in self._special_ids.items()}
        self.language_codes = [p for p in self.source_vocab if p.startswith(">>") and p.endswith("<<")]

    def __len__(self):
        """The source vocabulary's size."""
        return len(self.source_vocab)

    # Ids of the special tokens, in the vocabulary a side uses.
    @property
    def eos_id(self):
        return self.source_vocab[self.eos_token]

    @property
    def pad_id(self):
        return self.source_vocab[self.pad_token]

    @property
    def unk_id(self):
        return self.source_vocab[self.unk_token]

    def pieces(self, text, target=False):
        """The tokens of one sentence (no ``</s>``)."""
        if not isinstance(text, str):
            raise TypeError(f"MarianTokenizer: expected a str, got {type(text).__name__}")
        spm = self.target_spm if target else self.source_spm
        out = []
        for part in self._special.split(text):
            if not part:
                continue
            if part in self.special_tokens:
                out.append(part)
                continue
            if part.startswith(">>") and (end := part.find("<<")) != -1:   # a language code, kept whole
                out.append(part[:end + 2])
                part = part[end + 2:]
            out.extend(spm.encode(part, out_type=str))
        return out

    def encode(self, sentences, target=False, add_eos=True):
        """Id lists, ``</s>`` appended (unless add_eos=False), for a list of sentences (target=True: the target
        side's model and vocabulary)."""
        if isinstance(sentences, str):
            raise TypeError("MarianTokenizer.encode: expected a list of sentences, got one str (wrap it in a list)")
        vocab = self.target_vocab if target else self.source_vocab
        unk = vocab[self.unk_token]
        special = self._special_ids
        end = [special.get(self.eos_token, vocab[self.eos_token])] if add_eos else []
        return [[special[p] if p in special else vocab.get(p, unk) for p in self.pieces(s, target)] + end
                for s in sentences]

    def decode(self, ids_list, skip_special_tokens=True, target=True):
        """Sentences for id lists of the target side (target=False: the source side's)."""
        return [self._decode_one(list(ids), skip_special_tokens, target) for ids in ids_list]

    def _decode_one(self, ids, skip_special_tokens, target):
        table = self.target_pieces if target else self.source_pieces
        # transformers reads pieces (and an id outside the vocabulary) with the source model unless the
        # vocabularies are separate.
        spm = self.target_spm if target and self.separate_vocabs else self.source_spm
        text, run = "", []
        for i in ids:
            i = int(i)
            piece = self._special_pieces.get(i) or table.get(i)
            if piece is None:
                piece = spm.id_to_piece(i) if 0 <= i < spm.get_piece_size() else self.unk_token
                piece = piece or self.unk_token
            if piece in self.special_tokens:
                if skip_special_tokens:
                    continue
                text += spm.decode_pieces(run) + piece + " "
                run = []
            else:
                run.append(piece)
        text = (text + spm.decode_pieces(run)).replace(SPIECE_UNDERLINE, " ").strip()
        if self.clean_up_spaces:
            for before, after in _CLEAN_UP:
                text = text.replace(before, after)
        return text
