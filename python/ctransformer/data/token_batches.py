"""Batches of about N tokens, not N sentences: length-bucketed, reshuffled every epoch from a seed.

As fairseq's ``--max-tokens``: a batch of b pairs whose longest side (source or decoder input,
specials counted) is L tokens costs b * L padded positions, and that product stays <= batch_tokens.
Each epoch puts the pairs in a random order, sorts them by that length (stable, so pairs of equal
length stay shuffled), cuts the sorted run into the largest batches that fit, and shuffles the
batches. Pairs of one length end up together, so padding stays small, yet batch contents and order
change from epoch to epoch.

An epoch's batches depend only on (seed, epoch): nothing needs saving to resume exactly, and since
the sorted lengths are the same every epoch, so is the number of batches per epoch.
"""
import numpy as np

from .subword import BOS_ID, EOS_ID, PAD_ID


class TokenBatcher:
    """Token-bounded batches over pairs of id lists (no specials; the batcher adds them).

    Source: ids + [eos]. Target: [bos] + ids + [eos], fed as ``tgt[:, :-1]`` and predicted as
    ``tgt[:, 1:]``, so both sides count len(ids) + 1 positions.
    """

    def __init__(self, src_ids, tgt_ids, batch_tokens, seed, pad=PAD_ID, bos=BOS_ID, eos=EOS_ID):
        if len(src_ids) != len(tgt_ids):
            raise ValueError(f"TokenBatcher: {len(src_ids)} sources but {len(tgt_ids)} targets")
        if not src_ids:
            raise ValueError("TokenBatcher: no sentence pairs to batch")
        self.src_ids, self.tgt_ids = src_ids, tgt_ids
        self.pad, self.bos, self.eos, self.seed = pad, bos, eos, int(seed)
        self.src_len = np.array([len(s) + 1 for s in src_ids], dtype=np.int64)
        self.tgt_len = np.array([len(t) + 1 for t in tgt_ids], dtype=np.int64)
        self.key = np.maximum(self.src_len, self.tgt_len)
        if isinstance(batch_tokens, bool) or not isinstance(batch_tokens, (int, np.integer)) or batch_tokens < 1:
            raise ValueError(f"TokenBatcher: batch_tokens must be a positive int, got {batch_tokens!r}")
        longest = int(self.key.max())
        if longest > batch_tokens:
            raise ValueError(f"TokenBatcher: batch_tokens={batch_tokens} is below the longest pair's {longest} "
                             f"positions (pair {int(self.key.argmax())}); raise batch_tokens or filter long pairs")
        self.batch_tokens = int(batch_tokens)
        self._epoch, self._batches = None, None
        self.batches_per_epoch = len(self.epoch(0))

    def __len__(self):
        return self.batches_per_epoch

    def epoch(self, epoch):
        """The list of index arrays (pairs of each batch) of `epoch`, in the order they are trained."""
        if epoch == self._epoch:
            return self._batches
        rng = np.random.default_rng([self.seed, int(epoch)])
        order = rng.permutation(len(self.key))
        order = order[np.argsort(self.key[order], kind="stable")]
        keys = self.key[order]
        batches, start, n = [], 0, len(order)
        while start < n:
            # keys ascend, so the batch's longest pair is its last: take the most pairs with
            # count * key[last] <= batch_tokens.
            stop = start + 1
            while stop < n and (stop + 1 - start) * keys[stop] <= self.batch_tokens:
                stop += 1
            batches.append(order[start:stop])
            start = stop
        batches = [batches[i] for i in rng.permutation(len(batches))]
        self._epoch, self._batches = epoch, batches
        return batches

    def at_step(self, step):
        """(epoch, index within it, pair indices) of the batch trained at optimizer step `step` (from 0)."""
        epoch, index = divmod(int(step), self.batches_per_epoch)
        return epoch, index, self.epoch(epoch)[index]

    def arrays(self, indices):
        """(src (b, ls), tgt (b, lt + 1)) int64, padded with pad: the batch's model inputs."""
        return make_arrays([self.src_ids[i] for i in indices], [self.tgt_ids[i] for i in indices],
                           self.pad, self.bos, self.eos)

    def padding_fraction(self, epoch=0):
        """Share of the epoch's padded source and decoder-input positions that are padding."""
        slots = real = 0
        for b in self.epoch(epoch):
            slots += len(b) * (int(self.src_len[b].max()) + int(self.tgt_len[b].max()))
            real += int(self.src_len[b].sum() + self.tgt_len[b].sum())
        return 1.0 - real / slots


def make_arrays(src_ids, tgt_ids, pad=PAD_ID, bos=BOS_ID, eos=EOS_ID):
    """Pad a batch: sources ids + [eos]; targets [bos] + ids + [eos] (None for no targets)."""
    ls = max(len(s) for s in src_ids) + 1
    src = np.full((len(src_ids), ls), pad, dtype=np.int64)
    for r, s in enumerate(src_ids):
        src[r, :len(s)] = s
        src[r, len(s)] = eos
    if tgt_ids is None:
        return src, None
    lt = max(len(t) for t in tgt_ids) + 2
    tgt = np.full((len(tgt_ids), lt), pad, dtype=np.int64)
    for r, t in enumerate(tgt_ids):
        tgt[r, 0] = bos
        tgt[r, 1:len(t) + 1] = t
        tgt[r, len(t) + 1] = eos
    return src, tgt
