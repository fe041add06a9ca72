"""Translate text with a checkpoint of the ``multi30k`` task (``ctransformer-translate --checkpoint PATH``) or
a pretrained Hugging Face Marian model, an opus-mt translator (``ctransformer-translate --pretrained DIR``).

Reads sentences, one a line, from --input (plain or gzipped) or stdin; writes one detokenised
translation a line to --output or stdout, in the input's order. Sentences are encoded with the
sentencepiece model stored in the checkpoint (a Marian directory's own tokenizer files with --pretrained;
ctransformer.data.MarianTokenizer), sorted by length into batches of --batch-size, and
searched with the batched beam search of ``ctransformer.decode.beam_search`` (GNMT length penalty
--length-penalty; --beam-size 1 is greedy decoding). A translation may have up to
``max-len-ratio * L + 10`` subwords, L the longest source of its batch (batches hold sentences of
similar length), capped by the model's positions.

Long sentences: a source of more subwords than the model has positions (n_position, counting the
end-of-sentence id) is TRUNCATED to the positions it has, with a warning on stderr naming the line;
it is translated, never a crash.

``--bleu REF`` scores the output against the reference file with sacrebleu (corpus BLEU on
detokenised text, its default 13a tokenisation, cased) and prints the score with its signature.

``--save-quantized OUT`` translates nothing: it writes the checkpoint with its model quantised to int8
(``ctransformer.translator.quantize_checkpoint``: every Linear's weight int8 with per-row scales) to
OUT, which ctransformer-translate then runs in int8, as CTranslate2's converter's ``--quantization int8``.
"""
import argparse
import sys

import ctransformer as ct
from ctransformer import precision
from ctransformer.data.parallel_corpus import read_lines
# The library side lives in ctransformer.translator; these names stay importable from here (aliases).
from ctransformer.translator import (  # noqa: F401
    TASK, Translator, build_model, corpus_bleu, load_translation_checkpoint, quantize_checkpoint,
)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="ctransformer-translate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", help="a checkpoint of ctransformer-train multi30k")
    source.add_argument("--pretrained", metavar="PATH",
                        help="a Hugging Face Marian directory (an opus-mt model: config.json, model.safetensors, "
                             "source.spm, target.spm, vocab.json); no transformers needed")
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
    choices = [*precision.DECODING, *precision.ALIASES]
    parser.add_argument("--precision", choices=choices, default=None,
                        help="float32, bfloat16 (bf16 products under ct.autocast, the weights rounded to bf16 once) or "
                             "int8 (every Linear quantised: weights per output row, activations per row; "
                             "ctransformer.quantization); default: as the checkpoint holds the model (float32, or "
                             "int8 for a quantised checkpoint). fp32 and bf16 are aliases")
    parser.add_argument("--compute-type", choices=choices, default=None,
                        help="CTranslate2's name for --precision (an alias)")
    parser.add_argument("--save-quantized", metavar="OUT",
                        help="write the checkpoint with its model quantised to int8 to OUT, and translate nothing")
    args = parser.parse_args(argv)
    if args.save_quantized:
        if args.pretrained:
            parser.error("--save-quantized writes a ctransformer checkpoint; with --pretrained, quantise at run time "
                         "with --precision int8")
        try:
            quantize_checkpoint(args.checkpoint, args.save_quantized)
        except (OSError, ValueError) as error:
            parser.exit(2, f"ctransformer-translate: error: {error}\n")
        print(f"wrote {args.save_quantized}: the model quantised to int8", file=sys.stderr)
        return 0
    if args.threads:
        ct.set_num_threads(args.threads)
    try:
        chosen = precision.from_arguments(args.precision, args.compute_type, precision.DECODING, "ctransformer-translate")
    except ValueError:
        parser.error(f"--precision {args.precision} and --compute-type {args.compute_type} disagree")
    try:
        if args.pretrained:
            options = {k: v for k, v in (("length_penalty", args.length_penalty),
                                         ("max_len_ratio", args.max_len_ratio)) if v is not None}
            translator = Translator.from_pretrained(args.pretrained, beam_size=args.beam_size,
                                                    batch_size=args.batch_size, **options)
            model = translator.model
        else:
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
    with ct.decode.using_precision(model, chosen):
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
