"""Translation with a model of the ``multi30k`` task, as a library: the model it trains (``build_model``),
reading its checkpoints (``load_translation_checkpoint``), batched beam-search translation of raw sentences
(``Translator``) and corpus BLEU (``corpus_bleu``). The ``multi30k`` task, the ``ctransformer-translate``
command (``ctransformer.translate``, which re-exports these names; ``ctransformer.translator``, the old name
of this module, too) and the notebooks use them.
"""
import json
import math
import os
import sys

import numpy as np

import ctransformer as ct
from ctransformer import _arguments
from ctransformer.checkpoint import CheckpointError, load_model_state, read_checkpoint_contents
from ctransformer.data.marian_tokenizer import MarianTokenizer
from ctransformer.data.subword import BOS_ID, EOS_ID, PAD_ID, SubwordVocab
from ctransformer.data.token_batches import make_arrays

__all__ = ["TASK", "Translator", "build_model", "corpus_bleu", "load_translation_checkpoint", "quantize_checkpoint"]

TASK = "multi30k"
"""The training task whose checkpoints these functions read (``ctransformer-train multi30k``)."""


def build_model(cfg, vocab_size):
    """The multi30k task's model: jadore801120's post-norm Transformer with one embedding matrix
    shared by the source, the target and the output projection. The task and the translator both build it here."""
    d_model, n_head = cfg["d_model"], cfg["n_head"]
    if d_model % n_head:
        raise ValueError(f"multi30k: d_model ({d_model}) must be a multiple of n_head ({n_head})")
    config = ct.nn.TransformerConfig(
        n_src_vocab=vocab_size, n_trg_vocab=vocab_size, src_pad_idx=PAD_ID, trg_pad_idx=PAD_ID, d_word_vec=d_model,
        d_model=d_model, d_inner=cfg["d_inner"], n_layers=cfg["n_layers"], n_head=n_head, d_k=d_model // n_head,
        d_v=d_model // n_head, dropout=cfg["dropout"], n_position=cfg["n_position"], trg_emb_prj_weight_sharing=True,
        emb_src_trg_weight_sharing=True, scale_emb_or_prj=cfg["scale_emb_or_prj"])
    # Each side's own layers, heads and FFN width where the config sets them (0, or absent in an older
    # checkpoint's config: the shorthand's). A side's heads split d_model, as n_head's do.
    for key in ("encoder_n_layers", "decoder_n_layers", "encoder_d_inner", "decoder_d_inner"):
        if cfg.get(key, 0):
            setattr(config, key, cfg[key])
    for key in ("encoder_n_head", "decoder_n_head"):
        heads = cfg.get(key, 0)
        if heads:
            if d_model % heads:
                raise ValueError(f"multi30k: d_model ({d_model}) must be a multiple of {key} ({heads})")
            side = key[:-len("n_head")]
            setattr(config, key, heads)
            setattr(config, side + "d_k", d_model // heads)
            setattr(config, side + "d_v", d_model // heads)
    return ct.nn.Transformer(config)


def load_translation_checkpoint(path):
    """(model in eval mode, SubwordVocab, config) from a checkpoint the multi30k task wrote (quantised to int8
    when the checkpoint is, as quantize_checkpoint writes)."""
    contents = read_checkpoint_contents(path)
    extra = contents["extra"]
    if extra.get("task") != TASK or "sentencepiece" not in extra:
        raise CheckpointError(f"translate: {path} is not a checkpoint of the {TASK} task (it carries no "
                              f"sentencepiece model); write one with ctransformer-train {TASK} --checkpoint PATH")
    cfg = contents["config"]
    vocab = SubwordVocab.from_array(extra["sentencepiece"])
    model = build_model(cfg, len(vocab))
    try:
        load_model_state(model, contents["model"], contents["int8"], contents["quantization"])
    except RuntimeError as error:
        raise CheckpointError(f"translate: {path} does not fit the model its config describes: {error}") from error
    model.eval()
    return model, vocab, cfg


def quantize_checkpoint(path, output, dtype="int8"):
    """Write to `output` the checkpoint at `path` (of the multi30k task) with its model quantised to int8:
    its Linear weights stored as int8 with per-row scales (ctransformer.checkpoint), about a third of the
    float32 file for the task's model, whose embedding (shared with the output projection) stays float32.
    ctransformer-translate and load_translation_checkpoint read it as an int8 model."""
    from ctransformer.checkpoint import save_checkpoint

    contents = read_checkpoint_contents(path)
    model, _, cfg = load_translation_checkpoint(path)
    model.quantize(dtype)
    return save_checkpoint(output, model, step=contents["step"], config=cfg, extra=contents["extra"])


def _check_beam_size(value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"Translator: beam_size must be an int >= 1, got {value!r}")
    return value


def _check_max_decoding_length(value):
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"Translator: max_decoding_length must be an int >= 1 or None, got {value!r}")
    return value


def _check_length_penalty(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"Translator: length_penalty must be >= 0, got {value!r}")
    return float(value)


# Batches translate_iterable reads at once, as CTranslate2 reads 16 x max_batch_size: sorted by length together, its
# batches pad less, and the threads each have a batch to decode. On Multi30k's test2016 in its own order (batch 32, 2
# threads, AMD EPYC Zen 3) a read of 16 batches gave 1.44-1.73x (int8) and 1.45-1.49x (float32) the tokens/s of one
# batch a read (two rounds each, 2026-11-30).
READ_BATCHES = 16


class Translator:
    """Batched translation of raw sentences with a model and its subword vocabulary.

    ``vocab`` is the multi30k task's SubwordVocab, or a pretrained Marian model's MarianTokenizer
    (``Translator.from_pretrained``). The decoder's start, end and pad ids come from the model and the vocabulary;
    ``banned`` ids are never produced and ``force_end`` ends a translation that reaches its length limit with
    the end id, as Hugging Face's generate() does for Marian (bad_words_ids, forced_eos_token_id)."""

    def __init__(self, model, vocab, beam_size=ct.decode.DEFAULT_BEAM_SIZE, length_penalty=ct.decode.DEFAULT_ALPHA,
                 max_len_ratio=1.5, max_len_extra=10,
                 batch_size=32, warn=None, max_length=None, search="gnmt", early_stopping=False):
        _arguments.transformer(model, "Translator: model")
        _arguments.with_methods(vocab, "Translator: vocab", ["encode", "decode"],
                                "a subword vocabulary (SubwordVocab or MarianTokenizer)")
        _check_beam_size(beam_size)
        _check_length_penalty(length_penalty)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"Translator: batch_size must be an int >= 1, got {batch_size!r}")
        if not max_len_ratio > 0:
            raise ValueError(f"Translator: max_len_ratio must be > 0, got {max_len_ratio!r}")
        self.model, self.vocab = model, vocab
        self.beam_size, self.alpha = beam_size, float(length_penalty)
        self.max_len_ratio, self.max_len_extra = float(max_len_ratio), int(max_len_extra)
        self.batch_size = batch_size
        if search not in ("gnmt", "hf"):
            raise ValueError(f"Translator: search must be 'gnmt' (decode.beam_search) or 'hf' (decode.hf_beam_search, "
                             f"transformers' rules), got {search!r}")
        self.search, self.early_stopping = search, early_stopping
        self.n_position = model.config.n_position
        self.max_length = min(self.n_position, max_length) if max_length else self.n_position
        self.warn = warn if warn is not None else (lambda message: print(message, file=sys.stderr))
        self.truncated = 0
        self.marian = isinstance(vocab, MarianTokenizer)
        if self.marian:   # Marian: start on the decoder start id (the pad id), eos 0, pad never produced
            self.pad_id, self.end_id = model.config.trg_pad_idx, vocab.eos_id
            start = model.config.decoder_start_idx
            self.start_id = self.pad_id if start is None else start
            self.banned, self.force_end = [self.pad_id], True
        else:
            self.pad_id, self.start_id, self.end_id = PAD_ID, BOS_ID, EOS_ID
            self.banned, self.force_end = [], False

    @classmethod
    def from_pretrained(cls, path, beam_size=None, **options):
        """A Translator for a Hugging Face Marian directory (an opus-mt model): the model
        (``ct.nn.Transformer.from_pretrained``) and its tokenizer (``ct.data.MarianTokenizer``), with no
        ``transformers`` at run time. It searches as transformers' generate() does (``decode.hf_beam_search``; a beam of one
        is greedy decoding, as generate(num_beams=1)),
        with generation_config.json's num_beams (else 4), length_penalty (else 1.0), early_stopping and
        max_length (which caps the translations' length). Other options as the constructor's; search="gnmt"
        gives ctransformer's own beam search (GNMT's length penalty, length_penalty its alpha)."""
        path = _arguments.path(path, "Translator.from_pretrained: path")
        model = ct.nn.Transformer.from_pretrained(path)
        generation = {}
        file = os.path.join(path, "generation_config.json")
        if os.path.isfile(file):
            with open(file, encoding="utf-8") as f:
                generation = json.load(f)
        if beam_size is None:
            beam_size = int(generation.get("num_beams") or ct.decode.DEFAULT_BEAM_SIZE)
        options.setdefault("search", "hf")
        if options["search"] == "hf":
            options.setdefault("length_penalty", float(generation.get("length_penalty", 1.0)))
            options.setdefault("early_stopping", generation.get("early_stopping", False))
        options.setdefault("max_length", generation.get("max_length"))
        return cls(model, MarianTokenizer(path), beam_size=beam_size, **options)

    def encode(self, sentences, line_numbers=None):
        """Subword ids of each sentence, cut to the model's positions (one kept for end-of-sentence)."""
        room = self.n_position - 1
        ids = self.vocab.encode(list(sentences), add_eos=False) if self.marian else self.vocab.encode(list(sentences))
        for i, s in enumerate(ids):
            if len(s) > room:
                line = line_numbers[i] if line_numbers is not None else i + 1
                self.warn(f"warning: line {line} has {len(s)} subwords, more than the model's {room} "
                          f"source positions (n_position {self.n_position} less end-of-sentence): truncated to "
                          f"its first {room}")
                ids[i] = s[:room]
                self.truncated += 1
        return ids

    def max_len(self, src_len, max_decoding_length=None):
        """Target positions allowed (start symbol counted) for a batch whose longest source has src_len ids
        (end of sentence included): the ratio rule, capped by the translator's max_length, and by
        max_decoding_length + 1 when given (CTranslate2's name: at most that many tokens decoded, the end included)."""
        cap = self.max_length if max_decoding_length is None else min(self.max_length, max_decoding_length + 1)
        return max(2, min(cap, int(math.ceil(self.max_len_ratio * src_len)) + self.max_len_extra))

    def translate_ids(self, ids, beam_size=None, length_penalty=None, max_decoding_length=None):
        """Output subword ids (end-of-sentence and padding removed) for each source id list, in order.
        beam_size, length_penalty and max_decoding_length (at most that many tokens decoded, the end
        included) override the translator's own for this call."""
        beam_size = self.beam_size if beam_size is None else _check_beam_size(beam_size)
        alpha = self.alpha if length_penalty is None else _check_length_penalty(length_penalty)
        _check_max_decoding_length(max_decoding_length)
        out = [None] * len(ids)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        groups = [order[start:start + self.batch_size] for start in range(0, len(order), self.batch_size)]
        batches = []
        for rows in groups:
            src, _ = make_arrays([ids[i] for i in rows], None, pad=self.pad_id, eos=self.end_id)
            batches.append((src, ct.nn.get_pad_mask(src, self.pad_id), self.max_len(src.shape[1], max_decoding_length)))
        hf = self.search == "hf" and beam_size > 1   # transformers' generate(num_beams=1) is greedy search
        # Every batch in one call: with two threads or more each takes the next batch and decodes it whole
        # (ct.decode.search_batches, "lanes"). The weights' packed copies (ct.decode.PackedWeights) are kept across
        # the batches, not made again for each: at batch 1 every sentence is a batch.
        with ct.decode.PackedWeights():
            found = ct.decode.search_batches(self.model, batches, self.start_id, self.end_id, beam_size, alpha,
                                             search="hf" if hf else "gnmt", early_stopping=self.early_stopping,
                                             banned=self.banned, force_end=self.force_end)
        for rows, (hyps, _) in zip(groups, found):
            for r, i in enumerate(rows):
                h = hyps[r, 1:]
                end = np.flatnonzero((h == self.end_id) | (h == self.pad_id))
                out[i] = h[:end[0]].tolist() if len(end) else h.tolist()
        return out

    def translate(self, sentences, beam_size=None, length_penalty=None, max_decoding_length=None):
        """Detokenised translations of raw sentences (an empty line translates to an empty line). beam_size,
        length_penalty and max_decoding_length (at most that many tokens decoded, the end included: CTranslate2's
        name) override the translator's own for this call."""
        if isinstance(sentences, str):
            raise TypeError("Translator.translate: expected a list of sentences, got one str (wrap it in a list)")
        sentences = list(sentences)
        keep = [i for i, s in enumerate(sentences) if s.strip()]
        ids = self.encode([sentences[i] for i in keep], [i + 1 for i in keep])
        result = [""] * len(sentences)
        with ct.no_grad():
            outs = self.translate_ids(ids, beam_size, length_penalty, max_decoding_length)
            texts = self.vocab.decode(outs) if self.marian else [self.vocab.decode(out) for out in outs]
            for i, text in zip(keep, texts):
                result[i] = text
        return result

    def translate_iterable(self, sentences, beam_size=None, length_penalty=None, max_decoding_length=None,
                           read_batches=READ_BATCHES):
        """The translations of an iterable of raw sentences, yielded in order (CTranslate2's
        Translator.translate_iterable): a stream of any length is read, translated and written with read_batches x
        batch_size sentences in memory. Each read is translate() of its sentences: sorted by length there, cut into
        batches (each batch's length limit follows its own longest source) and, with two threads or more, decoded a
        batch a thread. So the first translation comes once read_batches batches are done. The other options are
        translate()'s."""
        if isinstance(sentences, str):
            raise TypeError("Translator.translate_iterable: expected an iterable of sentences, got one str")
        if isinstance(read_batches, bool) or not isinstance(read_batches, int) or read_batches < 1:
            raise ValueError(f"Translator.translate_iterable: read_batches must be an int >= 1, got {read_batches!r}")
        size = read_batches * self.batch_size
        read = []
        for sentence in sentences:
            if not isinstance(sentence, str):
                raise TypeError(f"Translator.translate_iterable: each sentence must be a str, got "
                                f"{type(sentence).__name__}")
            read.append(sentence)
            if len(read) == size:
                yield from self.translate(read, beam_size, length_penalty, max_decoding_length)
                read = []
        if read:
            yield from self.translate(read, beam_size, length_penalty, max_decoding_length)

    def generate_tokens(self, sentence, max_decoding_length=None):
        """Greedy translation of one raw sentence, a token at a time (CTranslate2's Translator.generate_tokens):
        yields ctransformer.sampling.StepResult(step, batch_id 0, token_id, text, log_prob, is_last) as each token is
        decoded (the decoder's step runs in C++ without the GIL). text is what the token completes: whole words,
        '' while a word grows, and the rest with the last token, so the pieces join to translate([sentence],
        beam_size=1); log_prob is the token's log-probability (banned ids excluded). The end token comes last, with
        its piece. Closing the iterator stops the decoding."""
        from .sampling import StepResult, _stable_text

        if not isinstance(sentence, str):
            raise TypeError(f"Translator.generate_tokens: sentence must be a str, got {type(sentence).__name__}")
        _check_max_decoding_length(max_decoding_length)
        if not sentence.strip():
            return
        src, _ = make_arrays(self.encode([sentence]), None, pad=self.pad_id, eos=self.end_id)
        limit = self.max_len(src.shape[1], max_decoding_length) - 1   # tokens after the start symbol
        tokens, sent = [], ""
        with ct.no_grad():
            decoder = ct.decode.StepDecoder(self.model, src, ct.nn.get_pad_mask(src, self.pad_id))
            current = np.array([self.start_id])
            for step in range(limit):
                logits = decoder.step(current).numpy()[0].astype(np.float64)
                logits[self.banned] = -np.inf
                last_position = step == limit - 1
                token = self.end_id if self.force_end and last_position else int(np.argmax(logits))
                log_prob = float(logits[token] - logits.max() - np.log(np.exp(logits - logits.max()).sum()))
                ended = token in (self.end_id, self.pad_id)
                is_last = ended or last_position
                if not ended:
                    tokens.append(token)
                full = self._decode_one(tokens)
                stable = full if is_last else _stable_text(full)
                text = stable[len(sent):] if stable.startswith(sent) else ""
                sent = stable if stable.startswith(sent) else sent
                yield StepResult(step, 0, token, text, log_prob, is_last)
                if is_last:
                    return
                current = np.array([token])

    def _decode_one(self, ids):
        return self.vocab.decode([ids])[0] if self.marian else self.vocab.decode(ids)


def corpus_bleu(hypotheses, references):
    """(sacrebleu BLEU result, its signature) for detokenised hypotheses against one reference each."""
    from sacrebleu.metrics import BLEU

    if len(hypotheses) != len(references):
        raise ValueError(f"corpus_bleu: {len(hypotheses)} translations but {len(references)} references")
    bleu = BLEU()
    return bleu.corpus_score(list(hypotheses), [list(references)]), bleu.get_signature()
