"""The Annotated Transformer's training pieces (its ``training.py``) over ctransformer.

``rate`` and ``LabelSmoothing`` run in C++; ``subsequent_mask``, ``Batch`` and ``SimpleLossCompute``
are thin NumPy code with the Annotated Transformer's semantics. Masks are NumPy bool arrays (True = may attend).
"""
import numpy as np

from ._core.loss import LabelSmoothing
from ._core.optim import rate

__all__ = ["rate", "LabelSmoothing", "subsequent_mask", "Batch", "SimpleLossCompute"]


def subsequent_mask(size):
    """(1, size, size) bool: True on and below the diagonal (position i may attend to j <= i)."""
    if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)):
        raise TypeError(f"subsequent_mask: size must be an int, got {type(size).__name__}")
    if size < 0:
        raise ValueError(f"subsequent_mask: size must be >= 0, got {size}")
    attn_shape = (1, size, size)
    return np.triu(np.ones(attn_shape, dtype=np.uint8), k=1) == 0


def _ids(array, what):
    a = np.asarray(array)
    if a.dtype.kind not in "iu":
        raise TypeError(f"Batch: {what} must be an integer array of token ids, got dtype {a.dtype}")
    if a.ndim != 2:
        raise ValueError(f"Batch: {what} must have shape (batch, length), got {a.shape}")
    return a


class Batch:
    """A batch with its masks, as the Annotated Transformer's.

    src: (b, ls) ids; src_mask: (b, 1, ls) = src != pad. With tgt (b, lt): tgt = tgt[:, :-1],
    tgt_y = tgt[:, 1:], tgt_mask: (b, lt-1, lt-1) = (tgt != pad) & subsequent_mask,
    ntokens = number of non-pad ids in tgt_y (an int).
    """

    def __init__(self, src, tgt=None, pad=2):
        self.src = _ids(src, "src")
        self.src_mask = np.expand_dims(self.src != pad, -2)
        if tgt is not None:
            tgt = _ids(tgt, "tgt")
            if tgt.shape[1] < 2:
                raise ValueError(f"Batch: tgt needs at least 2 positions (input and shifted output), got {tgt.shape}")
            self.tgt = np.ascontiguousarray(tgt[:, :-1])
            self.tgt_y = np.ascontiguousarray(tgt[:, 1:])
            self.tgt_mask = self.make_std_mask(self.tgt, pad)
            self.ntokens = int((self.tgt_y != pad).sum())

    @staticmethod
    def make_std_mask(tgt, pad):
        """Hide padding and future words: (b, lt, lt) bool."""
        tgt = np.asarray(tgt)
        tgt_mask = np.expand_dims(tgt != pad, -2)
        return tgt_mask & subsequent_mask(tgt.shape[-1])


class SimpleLossCompute:
    """The Annotated Transformer's loss wrapper: ``(loss * norm as a float, loss / norm as a Tensor)``.

    ``SimpleLossCompute(generator, criterion)`` applies ``generator`` (any callable, e.g.
    log_softmax of a Linear) to x first, as The Annotated Transformer; ``SimpleLossCompute(criterion)``
    (the seed's form) takes x as log-probabilities already. Call ``backward()`` on the second value.
    """

    def __init__(self, generator, criterion=None):
        if criterion is None:
            generator, criterion = None, generator
        if not callable(criterion):
            raise TypeError(f"SimpleLossCompute: criterion must be callable, got {type(criterion).__name__}")
        if generator is not None and not callable(generator):
            raise TypeError(f"SimpleLossCompute: generator must be callable, got {type(generator).__name__}")
        self.generator = generator
        self.criterion = criterion

    def __call__(self, x, y, norm):
        norm = float(norm)
        if norm == 0.0:
            raise ValueError("SimpleLossCompute: norm is 0 (no target tokens to average over)")
        if self.generator is not None:
            x = self.generator(x)
        y = np.asarray(y)
        sloss = self.criterion(x.reshape(-1, x.shape[-1]), y.reshape(-1)) / norm
        return sloss.item() * norm, sloss
