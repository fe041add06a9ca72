"""Decoding speed of a Marian model (opus-mt's architecture): ctransformer against CTranslate2.

    python benchmarks/marian_speed.py [--preset base|tiny] [--vocab 58101] [--steps 50] [--rounds 5] [--json OUT]

The weights are random (no opus-mt model can be downloaded here): a transformers MarianMTModel of a preset's
size with one shared vocabulary of --vocab ids, saved by transformers. --preset base (the default) is
opus-mt's base: d_model 512, 6 + 6 layers, 8 heads, feed-forward 2048, swish. --preset tiny is the distilled
students a CPU server runs (Helsinki-NLP's opus-mt_tiny_*, made by OpusDistillery): d_model 256, 6 encoder
layers and 2 decoder ones, 8 heads, feed-forward 1536, relu. ctransformer loads that directory (``nn.Transformer.from_pretrained``);
CTranslate2 converts it with its own converter (``ct2-transformers-converter``'s TransformersConverter, the
path an opus-mt user takes), float32 and int8 (quantised at load), in a process of its own at the fastest of
its documented settings (ct2_process.fastest). Both engines decode the same source ids (Multi30k-long:
random ids, 12-30 a sentence) for exactly --steps tokens (a random model rarely ends a sentence; CTranslate2's
min_decoding_length and max_decoding_length both --steps, ours max_len --steps + 1 with the end id never
produced), greedy and beam 4, batch 1 and 32, 2 threads each, taking turns (measure.interleaved). The table
gives the median milliseconds a call and CTranslate2's time over ours.
"""
import argparse
import datetime
import json
import os
import sys
import tempfile

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import measure  # noqa: E402
from ct2_process import Call, fastest  # noqa: E402


PRESETS = {
    "base": dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                 decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048, activation_function="swish"),
    "tiny": dict(d_model=256, encoder_layers=6, decoder_layers=2, encoder_attention_heads=8,
                 decoder_attention_heads=8, encoder_ffn_dim=1536, decoder_ffn_dim=1536, activation_function="relu"),
}


def random_marian(folder, vocab, seed=0, preset="base"):
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.MarianConfig(
        vocab_size=vocab, max_position_embeddings=512, pad_token_id=vocab - 1, decoder_start_token_id=vocab - 1,
        eos_token_id=0, forced_eos_token_id=0, scale_embedding=True, **PRESETS[preset])
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():   # never end: the eos logit far down, so every engine decodes all --steps tokens
        model.final_logits_bias[0, 0] = -1e4
    model.save_pretrained(folder)
    tokens = ["</s>", "<unk>"] + [f"\u2581w{i}" for i in range(2, vocab - 1)] + ["<pad>"]
    with open(os.path.join(folder, "vocab.json"), "w") as f:
        json.dump({t: i for i, t in enumerate(tokens)}, f)
    return tokens


def ct2_convert(hf_folder, out):
    """CTranslate2's own converter on the transformers directory (no tokenizer files: the vocabulary given)."""
    import ctranslate2
    import transformers
    from ctranslate2.converters.transformers import TransformersConverter

    class Converter(TransformersConverter):
        def load_tokenizer(self, tokenizer_class, model_name_or_path, **kwargs):
            return _VocabTokenizer(os.path.join(hf_folder, "vocab.json"))

    Converter(hf_folder).convert(out, force=True)
    return ctranslate2


class _VocabTokenizer:
    """What CTranslate2's Marian loader reads of a tokenizer: the vocabulary and the special tokens."""

    def __init__(self, path):
        with open(path) as f:
            self.vocab = json.load(f)
        self.eos_token, self.unk_token, self.pad_token, self.bos_token = "</s>", "<unk>", "<pad>", None

    def get_vocab(self):
        return dict(self.vocab)

    def __len__(self):
        return len(self.vocab)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="base", help="the model's shape")
    parser.add_argument("--vocab", type=int, default=58101, help="vocabulary size (opus-mt-de-en's: 58101)")
    parser.add_argument("--steps", type=int, default=50, help="tokens decoded a sentence")
    parser.add_argument("--rounds", type=int, default=5, help="timed calls of each engine a case")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cases", default="greedy-b1,greedy-b32,beam4-b1,beam4-b32")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()

    import ctransformer as ct

    ct.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    blas = ct.build_info()["blas"]
    results, meta = [], {"date": datetime.date.today().isoformat(), "cpu": _cpu(), "threads": args.threads,
                         "blas": blas, "kernel_level": os.environ.get("CTRANSFORMER_KERNEL_LEVEL", "(best)"),
                         "vocab": args.vocab, "steps": args.steps, "preset": args.preset}
    with tempfile.TemporaryDirectory() as folder:
        hf_dir, ct2_dir = os.path.join(folder, "hf"), os.path.join(folder, "ct2")
        tokens = random_marian(hf_dir, args.vocab, preset=args.preset)
        ct2_convert(hf_dir, ct2_dir)
        models = {"float32": ct.nn.Transformer.from_pretrained(hf_dir), "int8": ct.nn.Transformer.from_pretrained(hf_dir)}
        models["int8"].quantize("int8")   # once, as --compute-type int8 does for a whole run
        pad = models["float32"].config.trg_pad_idx
        for case in args.cases.split(","):
            kind, batch = case.split("-b")
            beam, b = (1 if kind == "greedy" else int(kind[4:])), int(batch)
            lengths = rng.integers(12, 31, size=b)
            ids = [list(rng.integers(2, args.vocab - 1, size=n)) for n in lengths]
            src = np.full((b, max(lengths) + 1), pad, dtype=np.int64)
            for r, row in enumerate(ids):
                src[r, :len(row)], src[r, len(row)] = row, 0
            mask = ct.nn.get_pad_mask(src, pad)
            source = [[tokens[i] for i in row] + ["</s>"] for row in ids]
            options = dict(beam_size=beam, max_batch_size=b, max_decoding_length=args.steps,
                           min_decoding_length=args.steps)

            def ours(model):
                def call():
                    with ct.no_grad():
                        if beam == 1:
                            return ct.decode.greedy_decode(model, src, mask, args.steps + 1, pad, 0, banned=[pad])
                        return ct.decode.beam_search(model, src, mask, args.steps + 1, pad, 0, beam_size=beam,
                                                     banned=[pad])
                return call

            fns = {"ct": ours(models["float32"]), "ct int8": ours(models["int8"])}
            workers = {}
            for name, compute_type in (("CTranslate2", "float32"), ("CTranslate2 int8", "int8")):
                worker = fastest(ct2_dir, compute_type, args.threads, source, options)
                workers[name] = worker
                fns[name] = Call(worker, **options)
            med, raw = measure.interleaved(fns, args.rounds, warmup=1)
            for worker in workers.values():
                worker.close()
            row = {"case": case, **{name: round(1e3 * s, 2) for name, s in med.items()},
                   "ct2_config": {name: w.config for name, w in workers.items()}}
            row["ratio float32"] = round(med["CTranslate2"] / med["ct"], 2)
            row["ratio int8"] = round(med["CTranslate2 int8"] / med["ct int8"], 2)
            print(json.dumps(row), flush=True)
            results.append(row)
    print(f"\n{meta}\n")
    print("| case | ct float32 | CTranslate2 float32 | CT2/ct | ct int8 | CTranslate2 int8 | CT2/ct |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['case']} | {r['ct']} | {r['CTranslate2']} | {r['ratio float32']} | {r['ct int8']} | "
              f"{r['CTranslate2 int8']} | {r['ratio int8']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1)


def _cpu():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    main()
