"""Decoding: greedy (seed 002), for one sequence or a batch.

greedy_decode encodes once, then extends the output one position at a time with the arg-max word.
"""
import numpy as np

import ctransformer as ct


def greedy_decode(model, src, src_mask, max_len, start_symbol):
    """(b, max_len) int64 ids, starting with start_symbol, for the (b, ls) source ids `src`.

    As seed 002's greedy_decode: the encoder runs once; each step decodes the whole prefix under
    the no-peek mask and appends the arg-max of the last position's logits.
    """
    src = np.asarray(src)
    if src.ndim != 2:
        raise ValueError(f"greedy_decode: src must have shape (batch, length), got {src.shape}")
    with ct.no_grad():
        memory = model.encode(src, src_mask)
        ys = np.full((src.shape[0], 1), start_symbol, dtype=np.int64)
        for _ in range(max_len - 1):
            trg_mask = ct.nn.get_subsequent_mask(ys)
            out = model.decode(ys, trg_mask, memory, src_mask)
            logits = model.project(out).numpy()[:, -1]
            ys = np.concatenate([ys, logits.argmax(-1)[:, None].astype(np.int64)], axis=1)
    return ys
