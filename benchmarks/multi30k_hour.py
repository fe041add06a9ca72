#!/usr/bin/env python
"""The Multi30k quality run: one hour of training on this machine, then test2016 sacreBLEU.

    python benchmarks/multi30k_hour.py [--out runs/hour] [--minutes 60] [--from-json runs/hour/m30k.json]

1. Trains (unless --from-json names a finished run):
       python -m ctransformer.train multi30k --checkpoint OUT/m30k.safetensors --steps 10000 \
           --max-minutes 60 --no-progress --json OUT/m30k.json --set log_every=100
   with the task's defaults: the fitted schedule laid over the steps the hour buys (measured from the run's
   first steps and one validation, ctransformer.budget), batches of 1024 tokens. --recipe noam runs the
   recipe the guide's first hour was measured with instead (jadore801120's Noam schedule, warmup 800,
   lr_factor 0.5, batches of 4096 tokens, dropout 0.2, no clipping; validation every epoch). The time
   budget covers training and validation (greedy BLEU on all 1014 validation sentences).
   The task then reports test2016 BLEU (beam 4, length penalty 0.6) for the last model and for the
   average of the last 5 validated ones.
2. Draws val BLEU and val loss against wall time (docs/images/multi30k_hour.png), translates test2016
   with the best of the last/averaged models by validation BLEU, and prints the BLEU with its
   signature and ten sample translations beside their references (the first ten of test2016) as
   Markdown for the guide (docs/translation.md).
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOAM = ["log_every=40", "schedule=noam", "batch_tokens=4096", "dropout=0.2", "grad_clip=0"]


def train(out, minutes, recipe):
    os.makedirs(out, exist_ok=True)
    command = [sys.executable, "-m", "ctransformer.train", "multi30k", "--checkpoint", f"{out}/m30k.safetensors",
               "--steps", "10000", "--max-minutes", str(minutes), "--no-progress", "--json", f"{out}/m30k.json",
               "--set", *(NOAM if recipe == "noam" else ["log_every=100"])]
    print("$", " ".join(command), flush=True)
    started = time.time()
    run = subprocess.run(command, cwd=ROOT)
    print(f"finished in {(time.time() - started) / 60:.1f} min (training, validation and the final evaluation)")
    if run.returncode not in (0, 1):      # 1: trained, but the BLEU target was not reached
        raise SystemExit(run.returncode)
    return f"{out}/m30k.json"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/hour", help="folder for the checkpoints and the result")
    parser.add_argument("--minutes", type=float, default=60.0, help="training time budget")
    parser.add_argument("--recipe", choices=["fitted", "noam"], default="fitted",
                        help="fitted: the task's defaults; noam: the recipe of the guide's first hour (2026-11)")
    parser.add_argument("--from-json", help="a finished run's --json result: only draw and translate")
    parser.add_argument("--image", default=os.path.join(ROOT, "docs", "images", "multi30k_hour.png"))
    args = parser.parse_args()
    path = args.from_json or train(args.out, args.minutes, args.recipe)
    with open(path) as f:
        result = json.load(f)
    stem = path[: -len(".json")]
    evaluation = result["evaluation"]
    validated = [h for h in result["history"] if "wall_min" in h]

    from ctransformer import plots
    from ctransformer.data.parallel_corpus import multi30k
    from ctransformer.translator import Translator, corpus_bleu, load_translation_checkpoint

    chart = plots.training_curves_chart(validated, x="wall_min", metrics=("val_bleu", "val_loss"), width=300)
    plots.save_png(chart.properties(title="Multi30k de-en: validation against wall time (minutes)"), args.image)
    print(f"wrote {args.image}")

    use_average = evaluation.get("averaged_val_bleu", -1) > evaluation["val_bleu"]
    checkpoint = f"{stem}.averaged.safetensors" if use_average else f"{stem}.safetensors"
    model, vocab, cfg = load_translation_checkpoint(checkpoint)
    test = multi30k("test2016")
    translator = Translator(model, vocab, beam_size=cfg["beam_size"], length_penalty=cfg["length_penalty"],
                            max_len_ratio=cfg["max_len_ratio"], batch_size=cfg["eval_batch_size"])
    started = time.perf_counter()
    hypotheses = translator.translate(test.src)
    seconds = time.perf_counter() - started
    score, signature = corpus_bleu(hypotheses, test.tgt)
    last = validated[-1]
    print(f"\ntrained {result['steps']} steps ({last['epoch']:.1f} epochs) in {result['train_seconds'] / 60:.1f} min "
          f"({result.get('stopped_by', 'all steps')}); {len(validated)} validations, the last at {last['wall_min']:.1f} min")
    print(f"final evaluation (beam {cfg['beam_size']}, length penalty {cfg['length_penalty']}): "
          f"val BLEU {evaluation['val_bleu']:.2f} last / {evaluation.get('averaged_val_bleu', float('nan')):.2f} "
          f"averaged; test2016 BLEU {evaluation['test_bleu']:.2f} last / "
          f"{evaluation.get('averaged_test_bleu', float('nan')):.2f} averaged")
    print(f"{os.path.basename(checkpoint)} on test2016: BLEU {score.score:.2f} ({signature}); "
          f"1000 sentences translated in {seconds:.1f} s")
    print("\n| # | source (test2016) | reference | ctransformer |\n|---|---|---|---|")
    for i in range(10):
        print(f"| {i + 1} | {test.src[i]} | {test.tgt[i]} | {hypotheses[i]} |")


if __name__ == "__main__":
    sys.exit(main())
