"""A first look: build a small model from Python, train it on a toy batch, watch the loss fall.

Run with ``python -m ctransformer.demo``. The model reads a token and predicts the next one in the
cycle 1 -> 2 -> ... -> 9 -> 1 through an embedding, a hidden ReLU layer and an output layer;
plain gradient descent on the cross-entropy.
"""
import time

import numpy as np

import ctransformer as ct
from ctransformer import functional as F


def main(steps=60, lr=0.5, seed=0):
    ct.manual_seed(seed)
    vocab, width = 10, 32
    embed = ct.nn.Embedding(vocab, width)
    hidden = ct.nn.Linear(width, width)
    out = ct.nn.Linear(width, vocab)
    params = embed.parameters() + hidden.parameters() + out.parameters()

    tokens = np.arange(1, 10, dtype=np.int64).repeat(4)   # a toy batch of 36 tokens
    targets = tokens % 9 + 1                               # the next token in the cycle
    start = time.perf_counter()
    for step in range(steps + 1):
        logits = out(F.relu(hidden(embed(tokens))))
        loss = F.cross_entropy(logits, targets)
        for p in params:
            p.zero_grad()
        loss.backward()
        with ct.no_grad():
            for p in params:
                p.numpy()[...] -= lr * p.grad.numpy()   # numpy() is a view: an in-place SGD step
        if step % 10 == 0:
            accuracy = (logits.numpy().argmax(-1) == targets).mean()
            print(f"step {step:3d}  loss {loss.item():.4f}  accuracy {accuracy:.2f}")
    print(f"{steps} steps in {time.perf_counter() - start:.2f} s")
    return loss.item()


if __name__ == "__main__":
    main()
