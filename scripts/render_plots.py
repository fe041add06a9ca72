#!/usr/bin/env python
"""Render the blog's plots (the Annotated Transformer's), computed by ctransformer, to PNG files for the
guide (docs/images).

    python scripts/render_plots.py [--out docs/images] [--attention-steps N]

Writes learning_rate.png, label_smoothing.png, subsequent_mask.png, penalization.png (the blog's four
plots), positional_encoding.png (the paper's sinusoid table) and, with --attention-steps N > 0,
toy_cross_attention.png: the cross-attention of the toy translator after N training steps of
the toy-translate task with epochs of 600 steps, as the toy_translation notebook (minutes of training,
so off by default; the committed image used 6000). The numbers come from ctransformer exactly as in the
notebooks; the charts are ctransformer.plots' and vl-convert draws them (no browser).
"""
import argparse
import pathlib
import sys
import time

import numpy as np

import ctransformer as ct
from ctransformer import plots
from ctransformer.annotated import LabelSmoothing

ROOT = pathlib.Path(__file__).resolve().parents[1]


def learning_rates(opts=((512, 1, 4000), (512, 1, 8000), (256, 1, 4000)), steps=20000):
    """Plot 1: lr read from a real Adam(lr=1) under LambdaLR(rate) before every step, as the Annotated
    Transformer does."""
    dummy_model = ct.nn.Linear(1, 1)
    result = {}
    for model_size, factor, warmup in opts:
        optimizer = ct.optim.Adam(dummy_model.parameters(), lr=1, betas=(0.9, 0.98), eps=1e-9)
        scheduler = ct.optim.LambdaLR(
            optimizer, lr_lambda=lambda step, m=model_size, f=factor, w=warmup: ct.optim.rate(step, m, f, w))
        lrs = []
        for _ in range(steps):
            lrs.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
        result[f"{model_size} - {warmup}"] = lrs
    return result


def label_smoothing_dist():
    """Plot 2: LabelSmoothing(5, 0, 0.4).true_dist for the Annotated Transformer's predictions and targets
    [2, 1, 0, 3, 3]."""
    crit = LabelSmoothing(5, 0, 0.4)
    crit(ct.tensor(np.array([[0, 0.2, 0.7, 0.1, 0]] * 5, dtype=np.float32)), np.array([2, 1, 0, 3, 3]))
    return crit.true_dist


def penalization_losses():
    """Plot 4: the Annotated Transformer's loss(x, crit) with LabelSmoothing(5, 0, 0.1), x = 1..99."""
    crit = LabelSmoothing(5, 0, 0.1)

    def loss(x):
        d = x + 3 * 1
        predict = ct.tensor(np.array([[0, x / d, 1 / d, 1 / d, 1 / d]], dtype=np.float32))
        return crit(ct.functional.log_softmax(predict, -1), np.array([1])).item()

    return [loss(x) for x in range(1, 100)]


def toy_cross_attention(steps, steps_per_epoch=600, seed=0):
    """The toy translator trained `steps` steps by the library's recipe (ctransformer.train's
    toy-translate task); its last cross-attention layer on a fresh sentence, cut to the real words,
    with the words as labels, and the task's evaluation."""
    from ctransformer.data import PAD, SOS, VOCAB_X, VOCAB_Y, toy_translation_batch
    from ctransformer.train import train

    _, model, result = train("toy-translate", {"steps": steps, "steps_per_epoch": steps_per_epoch, "seed": seed},
                             progress=False, log=lambda *_: None)
    model.eval()
    x, _ = toy_translation_batch(np.random.default_rng(seed + 3), 1)
    out = ct.decode.greedy_decode(model, x, ct.nn.get_pad_mask(x, PAD), max_len=x.shape[1], start_symbol=SOS)
    with ct.no_grad():
        _, _, _, dec_enc = model(x, out, return_attns=True)
    n_src = int((x[0] != PAD).sum())
    eos = np.flatnonzero(out[0] == VOCAB_Y["<EOS>"])
    n_trg = int(eos[0]) if len(eos) else out.shape[1]
    weights = dec_enc[-1].numpy()[0][:, :n_trg, :n_src]
    return weights, [list(VOCAB_Y)[i] for i in out[0]], [list(VOCAB_X)[i] for i in x[0]], result["evaluation"]


def blog_charts():
    """{file stem: chart} of the blog's four plots and the positional-encoding table."""
    table = ct.nn.PositionalEncoding(64, 100, pe_formula="paired").pos_table.numpy()[0]
    return {
        "learning_rate": plots.learning_rate_chart(learning_rates()),
        "label_smoothing": plots.label_smoothing_chart(label_smoothing_dist()),
        "subsequent_mask": plots.subsequent_mask_chart(ct.annotated.subsequent_mask(20)[0]),
        "penalization": plots.penalization_chart(penalization_losses()),
        "positional_encoding": plots.positional_encoding_chart(table, title="positional encoding (d_model 64)"),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "docs" / "images"), help="folder of the PNG files")
    parser.add_argument("--attention-steps", type=int, default=0,
                        help="also train the toy translator this many steps and draw its cross-attention")
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    charts = blog_charts()
    if args.attention_steps > 0:
        began = time.perf_counter()
        weights, trg_words, src_words, evaluation = toy_cross_attention(args.attention_steps)
        print(f"trained the toy translator {args.attention_steps} steps in {time.perf_counter() - began:.0f} s: "
              f"{evaluation}")
        charts["toy_cross_attention"] = plots.attention_chart(
            weights, trg_words, src_words,
            title=f"toy translator, last decoder layer: cross-attention ({args.attention_steps} steps)")
    for name, chart in charts.items():
        path = plots.save_png(chart, out / f"{name}.png")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
