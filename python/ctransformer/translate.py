"""Translate text with a checkpoint of the ``multi30k`` task: ``ctransformer-translate --checkpoint PATH``.

Reads sentences, one a line, from --input (plain or gzipped) or stdin; writes one detokenised
translation a line to --output or stdout, in the input's order. Sentences are encoded with the
sentencepiece model stored in the checkpoint, sorted by length into batches of --batch-size, and
searched with the batched beam search of ``ctransformer.decode.beam_search`` (GNMT length penalty
--length-penalty; --beam-size 1 is greedy decoding). A translation may have up to
``max-len-ratio * L + 10`` subwords, L the longest source of its batch (batches hold sentences of
similar length), capped by the model's positions.

Long sentences: a source of more subwords than the model has positions (n_position, counting the
end-of-sentence id) is TRUNCATED to the positions it has, with a warning on stderr naming the line;
it is translated, never a crash.

``--bleu REF`` scores the output against the reference file with sacrebleu (corpus BLEU on
detokenised text, its default 13a tokenisation, cased) and prints the score with its signature.
"""
import argparse
import json
import math
import sys

import numpy as np

import ctransformer as ct
from ctransformer.data.parallel_corpus import read_lines
from ctransformer.data.subword import BOS_ID, EOS_ID, PAD_ID, SubwordVocab
from ctransformer.data.token_batches import make_arrays

TASK = "multi30k"


def build_model(cfg, vocab_size):
    """System A's Transformer with one embedding matrix for source, target and output projection."""
    d_model, n_head = cfg["d_model"], cfg["n_head"]
    if d_model % n_head:
        raise ValueError(f"multi30k: d_model ({d_model}) must be a multiple of n_head ({n_head})")
    return ct.nn.Transformer(vocab_size, vocab_size, PAD_ID, PAD_ID, d_word_vec=d_model, d_model=d_model,
                             d_inner=cfg["d_inner"], n_layers=cfg["n_layers"], n_head=n_head, d_k=d_model // n_head,
                             d_v=d_model // n_head, dropout=cfg["dropout"], n_position=cfg["n_position"],
                             trg_emb_prj_weight_sharing=True, emb_src_trg_weight_sharing=True,
                             scale_emb_or_prj=cfg["scale_emb_or_prj"])


def load_translation_checkpoint(path):
    """(model in eval mode, SubwordVocab, config) from a checkpoint the multi30k task wrote."""
    from ctransformer.checkpoint import CheckpointError, _unflatten, read_checkpoint

    tensors, metadata = read_checkpoint(path)
    extra = _unflatten(json.loads(metadata.get("extra", "{}")), tensors)
    if extra.get("task") != TASK or "sentencepiece" not in extra:
        raise CheckpointError(f"translate: {path} is not a checkpoint of the {TASK} task (it carries no "
                              f"sentencepiece model); write one with ctransformer-train {TASK} --checkpoint PATH")
    cfg = json.loads(metadata["config"])
    vocab = SubwordVocab.from_array(extra["sentencepiece"])
    model = build_model(cfg, len(vocab))
    state = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as error:
        raise CheckpointError(f"translate: {path} does not fit the model its config describes: {error}") from error
    model.eval()
    return model, vocab, cfg


class Translator:
    """Batched translation of raw sentences with a model and its subword vocabulary."""

    def __init__(self, model, vocab, beam_size=4, length_penalty=0.6, max_len_ratio=1.5, max_len_extra=10,
                 batch_size=32, warn=None):
        for name, value, low in (("beam_size", beam_size, 1), ("batch_size", batch_size, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"Translator: {name} must be an int >= {low}, got {value!r}")
        if not length_penalty >= 0:
            raise ValueError(f"Translator: length_penalty must be >= 0, got {length_penalty!r}")
        if not max_len_ratio > 0:
            raise ValueError(f"Translator: max_len_ratio must be > 0, got {max_len_ratio!r}")
        self.model, self.vocab = model, vocab
        self.beam_size, self.alpha = beam_size, float(length_penalty)
        self.max_len_ratio, self.max_len_extra = float(max_len_ratio), int(max_len_extra)
        self.batch_size = batch_size
        self.n_position = model.config.n_position
        self.warn = warn if warn is not None else (lambda message: print(message, file=sys.stderr))
        self.truncated = 0

    def encode(self, sentences, line_numbers=None):
        """Subword ids of each sentence, cut to the model's positions (one kept for end-of-sentence)."""
        room = self.n_position - 1
        ids = self.vocab.encode(list(sentences))
        for i, s in enumerate(ids):
            if len(s) > room:
                line = line_numbers[i] if line_numbers is not None else i + 1
                self.warn(f"warning: line {line} has {len(s)} subwords, more than the model's {room} "
                          f"source positions (n_position {self.n_position} less end-of-sentence): truncated to "
                          f"its first {room}")
                ids[i] = s[:room]
                self.truncated += 1
        return ids

    def max_len(self, src_len):
        """Target positions allowed (start symbol counted) for a batch whose longest source has src_len ids."""
        return max(2, min(self.n_position, int(math.ceil(self.max_len_ratio * src_len)) + self.max_len_extra))

    def translate_ids(self, ids):
        """Output subword ids (end-of-sentence and padding removed) for each source id list, in order."""
        out = [None] * len(ids)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        for start in range(0, len(order), self.batch_size):
            rows = order[start:start + self.batch_size]
            src, _ = make_arrays([ids[i] for i in rows], None)
            mask = ct.nn.get_pad_mask(src, PAD_ID)
            hyps, _ = ct.decode.beam_search(self.model, src, mask, self.max_len(src.shape[1]), BOS_ID, EOS_ID,
                                            beam_size=self.beam_size, alpha=self.alpha)
            for r, i in enumerate(rows):
                h = hyps[r, 1:]
                end = np.flatnonzero((h == EOS_ID) | (h == PAD_ID))
                out[i] = h[:end[0]].tolist() if len(end) else h.tolist()
        return out

    def translate(self, sentences):
        """Detokenised translations of raw sentences (an empty line translates to an empty line)."""
        sentences = list(sentences)
        keep = [i for i, s in enumerate(sentences) if s.strip()]
        ids = self.encode([sentences[i] for i in keep], [i + 1 for i in keep])
        result = [""] * len(sentences)
        with ct.no_grad():
            for i, out in zip(keep, self.translate_ids(ids)):
                result[i] = self.vocab.decode(out)
        return result


def corpus_bleu(hypotheses, references):
    """(sacrebleu BLEU result, its signature) for detokenised hypotheses against one reference each."""
    from sacrebleu.metrics import BLEU

    if len(hypotheses) != len(references):
        raise ValueError(f"corpus_bleu: {len(hypotheses)} translations but {len(references)} references")
    bleu = BLEU()
    return bleu.corpus_score(list(hypotheses), [list(references)]), bleu.get_signature()


def main(argv=None):
    parser = argparse.ArgumentParser(prog="ctransformer-translate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="a checkpoint of ctransformer-train multi30k")
    parser.add_argument("--input", help="sentences to translate, one a line, plain or gzipped (default: stdin)")
    parser.add_argument("--output", help="where the translations go (default: stdout)")
    parser.add_argument("--beam-size", type=int, default=None, help="beam width (default: the checkpoint's, "
                        "usually 4); 1 is greedy decoding")
    parser.add_argument("--batch-size", type=int, default=32, help="sentences searched together (default 32)")
    parser.add_argument("--length-penalty", type=float, default=None,
                        help="GNMT length penalty alpha (default: the checkpoint's, usually 0.6; 0 = none)")
    parser.add_argument("--max-len-ratio", type=float, default=None,
                        help="a translation has at most ratio * source subwords + 10 (default: the checkpoint's, "
                             "usually 1.5)")
    parser.add_argument("--bleu", metavar="REF", help="print sacrebleu's corpus BLEU and signature against this reference file (on stderr when the "
                             "translations go to stdout)")
    parser.add_argument("--threads", type=int, default=None, help="threads (default: all cores)")
    args = parser.parse_args(argv)
    if args.threads:
        ct.set_num_threads(args.threads)
    try:
        model, vocab, cfg = load_translation_checkpoint(args.checkpoint)
        translator = Translator(model, vocab,
                                beam_size=args.beam_size if args.beam_size is not None else cfg["beam_size"],
                                length_penalty=(args.length_penalty if args.length_penalty is not None
                                                else cfg["length_penalty"]),
                                max_len_ratio=(args.max_len_ratio if args.max_len_ratio is not None
                                               else cfg["max_len_ratio"]),
                                batch_size=args.batch_size)
        if args.input:
            sentences = read_lines(args.input)
        else:   # UTF-8 whatever the locale says
            text = sys.stdin.buffer.read().decode("utf-8")
            sentences = [line.strip() for line in text.split("\n")]
            if sentences[-1] == "":     # the last newline ends the last line; it does not start another
                sentences.pop()
        references = read_lines(args.bleu) if args.bleu else None
        if references is not None and len(references) != len(sentences):
            raise ValueError(f"--bleu: {args.bleu} has {len(references)} lines but the input has {len(sentences)}")
    except UnicodeDecodeError as error:
        parser.exit(2, f"ctransformer-translate: error: the input is not UTF-8 text ({error})\n")
    except (OSError, ValueError) as error:
        parser.exit(2, f"ctransformer-translate: error: {error}\n")
    translations = translator.translate(sentences)
    text = "".join(t + "\n" for t in translations)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.flush()
    if translator.truncated:
        print(f"warning: {translator.truncated} source sentence(s) truncated to the model's positions", file=sys.stderr)
    if references is not None:
        score, signature = corpus_bleu(translations, references)
        # On stderr when the translations go to stdout, so a pipe gets the text alone.
        print(f"{score} {signature}", file=sys.stderr if not args.output else sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
