"""Tiny Shakespeare at the character level, split 90/10 by position as nanoGPT's shakespeare_char."""
import gzip

import numpy as np

from .download import fetch


class CharDataset:
    """Characters to ids (sorted vocabulary of the whole text) and random (x, y) training blocks."""

    def __init__(self, text=None, train_fraction=0.9):
        if text is None:
            # A local copy, or downloaded once into the user cache (download.fetch).
            with gzip.open(fetch("tinyshakespeare/input.txt.gz"), "rt", encoding="utf-8") as f:
                text = f.read()
        self.chars = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}
        data = np.array([self.stoi[c] for c in text], dtype=np.int64)
        n = int(train_fraction * len(data))
        self.train, self.val = data[:n], data[n:]

    @property
    def vocab_size(self):
        return len(self.chars)

    def encode(self, s):
        return np.array([self.stoi[c] for c in s], dtype=np.int64)

    def decode(self, ids):
        return "".join(self.chars[int(i)] for i in ids)

    def batch(self, split, block_size, batch_size, rng: np.random.Generator):
        """x, y of shape (batch_size, block_size); y is x shifted by one character."""
        data = self.train if split == "train" else self.val
        starts = rng.integers(0, len(data) - block_size, size=batch_size)
        x = np.stack([data[i:i + block_size] for i in starts])
        y = np.stack([data[i + 1:i + 1 + block_size] for i in starts])
        return x, y


class CharTokenizer:
    """The shakespeare task's ids for text: each character's index in ``chars`` plus one (the GPT reference ignores
    target id 0 in its loss, so the task keeps id 0 for no character). ``encode`` refuses a character outside
    ``chars``, naming it."""

    def __init__(self, chars):
        self.chars = "".join(chars)
        self.stoi = {c: i + 1 for i, c in enumerate(self.chars)}

    def __len__(self):
        return len(self.chars) + 1

    def encode(self, text):
        unknown = sorted({c for c in text if c not in self.stoi})
        if unknown:
            raise ValueError(f"the text holds characters the model does not know: {''.join(unknown)!r} (it knows "
                             f"{len(self.chars)} characters)")
        return [self.stoi[c] for c in text]

    def decode(self, ids):
        return "".join(self.chars[int(i) - 1] for i in ids if 0 < int(i) <= len(self.chars))
