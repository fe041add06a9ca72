"""The Annotated Transformer's copy task: random sequences whose target is the sequence itself."""
import numpy as np


def copy_batch(rng: np.random.Generator, batch_size=80, length=10, vocab=11, start=1):
    """(src, tgt), each (batch_size, length) int64 with ids in [1, vocab) and the first token `start`.

    Id 0 is padding and never appears; the model learns to reproduce src after the start token.
    """
    data = rng.integers(1, vocab, size=(batch_size, length), dtype=np.int64)
    data[:, 0] = start
    return data, data.copy()
