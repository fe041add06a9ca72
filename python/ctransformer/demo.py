"""A first look: a Transformer learns to copy, and shows where it looks.

Run with ``python -m ctransformer.demo`` (``make demo``). In about ten seconds on two cores it trains the
Annotated Transformer's copy task (a source of random tokens; the target is the same tokens) to exact copies, with
a progress bar; then it copies a sequence it has never seen and saves what its decoder attended to as a picture
(an SVG, which any browser opens): for each output token, a row of shaded source tokens, one panel per head. A model
that copies looks at the token it is about to write, so each panel shows a diagonal.
"""
import argparse
import os
import tempfile
import time

import numpy as np

import ctransformer as ct
from ctransformer.data import copy_batch

VOCAB, LENGTH, START, PAD = 11, 10, 1, 0   # tokens 1..10 (1 also starts every sequence); 0 pads, and never comes


def build(seed):
    """A small post-norm Transformer (jadore801120's: one encoder and one decoder layer of width 64, four heads)
    with the Annotated Transformer's optimizer and schedule (Adam, the learning rate rising for 100 steps, then
    falling as 1/sqrt(step))."""
    ct.manual_seed(seed)
    model = ct.nn.Transformer(VOCAB, VOCAB, PAD, PAD, d_word_vec=64, d_model=64, d_inner=256, n_layers=1, n_head=4,
                              d_k=16, d_v=16, dropout=0.0)
    optimizer = ct.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    scheduler = ct.optim.LambdaLR(optimizer, ct.optim.NoamLambda(64, 1.0, 100))
    return model, optimizer, scheduler


def train(model, optimizer, scheduler, steps, batch_size, rng):
    """Teacher forcing: the decoder reads the target shifted right and predicts each next token (cross-entropy)."""
    from tqdm import tqdm

    model.train()
    bar = tqdm(range(steps), desc="training", unit="step", ncols=80)
    for _ in bar:
        src, tgt = copy_batch(rng, batch_size, LENGTH, VOCAB, START)
        logits = model(src, tgt[:, :-1])                       # (batch * (LENGTH - 1), VOCAB)
        loss = ct.functional.cross_entropy(logits, tgt[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        bar.set_postfix(loss=f"{loss.item():.3f}")
    model.eval()


def exact_copies(model, rng, batches=5, batch_size=80):
    """The share of fresh sources that greedy decoding copies exactly."""
    right = []
    for _ in range(batches):
        src, _ = copy_batch(rng, batch_size, LENGTH, VOCAB, START)
        out = ct.decode.greedy_decode(model, src, ct.nn.get_pad_mask(src, PAD), max_len=LENGTH, start_symbol=START)
        right.append((out == src).all(axis=1))
    return float(np.concatenate(right).mean())


def cross_attention(model, src):
    """The (last) decoder layer's attention over the source while it writes the copy: (heads, LENGTH - 1, LENGTH),
    row i the weights with which output token i + 1 was predicted."""
    out = ct.decode.greedy_decode(model, src, ct.nn.get_pad_mask(src, PAD), max_len=LENGTH, start_symbol=START)
    with ct.no_grad():
        _, _, _, dec_enc = model(src, out[:, :-1], return_attns=True)
    return out[0], dec_enc[-1].numpy()[0]


def attention_svg(weights, source, output):
    """One heat map a head: rows the output tokens (the token each row predicted), columns the source tokens,
    darker where the head looked harder (weights 0 to 1)."""
    heads, rows, cols = weights.shape
    cell, gap, left, top = 22, 30, 40, 56
    width = left + heads * (cols * cell + gap)
    height = top + rows * cell + 12
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="12">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             '<text x="8" y="16" font-size="14">Where the decoder looks while it copies (each head): '
             'rows are the tokens it wrote, columns the source</text>']
    for h in range(heads):
        x0 = left + h * (cols * cell + gap)
        parts.append(f'<text x="{x0}" y="{top - 24}" font-weight="bold">head {h + 1}</text>')
        for j, token in enumerate(source):
            parts.append(f'<text x="{x0 + j * cell + cell / 2}" y="{top - 6}" text-anchor="middle">{token}</text>')
        for i in range(rows):
            if h == 0:
                parts.append(f'<text x="{left - 8}" y="{top + i * cell + 15}" text-anchor="end">{output[i + 1]}</text>')
            for j in range(cols):
                shade = int(round(255 * (1.0 - float(weights[h, i, j]))))
                parts.append(f'<rect x="{x0 + j * cell}" y="{top + i * cell}" width="{cell - 1}" height="{cell - 1}" '
                             f'fill="rgb({shade},{shade},255)" stroke="#e4e4ee"/>')
    parts.append("</svg>")
    return "\n".join(parts)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m ctransformer.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1200, help="training steps (default 1200)")
    parser.add_argument("--batch-size", type=int, default=64, help="sequences a step (default 64)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--picture", default=os.path.join(tempfile.gettempdir(), "ctransformer-attention.svg"),
                        help="where the attention map goes (default: %(default)s)")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    model, optimizer, scheduler = build(args.seed)
    print(f"A Transformer of {sum(p.numpy().size for p in model.parameters()):,} parameters learns to copy "
          f"sequences of {LENGTH} tokens.")
    start = time.perf_counter()
    train(model, optimizer, scheduler, args.steps, args.batch_size, rng)
    seconds = time.perf_counter() - start
    exact = exact_copies(model, rng)
    print(f"{args.steps} steps in {seconds:.1f} s: greedy decoding copies {exact:.1%} of 400 new sequences exactly")

    src, _ = copy_batch(np.random.default_rng(args.seed + 1), 1, LENGTH, VOCAB, START)
    output, weights = cross_attention(model, src)
    print(f"source  {' '.join(map(str, src[0]))}\ncopy    {' '.join(map(str, output))}")
    with open(args.picture, "w") as f:
        f.write(attention_svg(weights, src[0], output))
    print(f"what it looked at while copying: {args.picture} (open it in a browser)")
    return exact


if __name__ == "__main__":
    main()
