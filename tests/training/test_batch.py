"""The Annotated Transformer's subsequent_mask and Batch against its own torch code (exact: masks and ids)."""
import numpy as np
import pytest
import torch

from ctransformer.annotated import Batch, subsequent_mask


def annotated_subsequent_mask(size):
    """The Annotated Transformer's subsequent_mask (002_5b1a8dee14bb0756.txt), verbatim."""
    attn_shape = (1, size, size)
    mask = torch.triu(torch.ones(attn_shape), diagonal=1).type(torch.uint8)
    return mask == 0


class AnnotatedBatch:
    """The Annotated Transformer's Batch, verbatim."""

    def __init__(self, src, tgt=None, pad=2):
        self.src = src
        self.src_mask = (src != pad).unsqueeze(-2)
        if tgt is not None:
            self.tgt = tgt[:, :-1]
            self.tgt_y = tgt[:, 1:]
            self.tgt_mask = self.make_std_mask(self.tgt, pad)
            self.ntokens = (self.tgt_y != pad).data.sum()

    @staticmethod
    def make_std_mask(tgt, pad):
        tgt_mask = (tgt != pad).unsqueeze(-2)
        tgt_mask = tgt_mask & subsequent_mask_for_annotated(tgt.size(-1)).type_as(tgt_mask.data)
        return tgt_mask


subsequent_mask_for_annotated = annotated_subsequent_mask


def equal(ours, theirs):
    theirs = theirs.numpy()
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("size", [0, 1, 2, 5, 20])
def test_subsequent_mask_equals_the_annotated_transformers(size):
    equal(subsequent_mask(size), annotated_subsequent_mask(size))


def test_subsequent_mask_is_lower_triangular():
    m = subsequent_mask(20)[0]  # the blog's heat map
    assert m.dtype == np.bool_
    assert np.array_equal(m, np.tril(np.ones((20, 20), dtype=bool)))


# A padded batch (pad = 2, the Annotated Transformer's default): <SOS>=0 ... <EOS>=1 then padding.
SRC = np.array([[0, 5, 6, 7, 1, 2, 2],
                [0, 9, 8, 7, 6, 5, 1],
                [0, 4, 1, 2, 2, 2, 2]], dtype=np.int64)
TGT = np.array([[0, 7, 6, 5, 1, 2, 2, 2],
                [0, 5, 6, 7, 8, 9, 5, 1],
                [0, 4, 4, 1, 2, 2, 2, 2]], dtype=np.int64)


@pytest.mark.parametrize("pad", [2, 1])
def test_batch_equals_the_annotated_transformers(pad):
    ours = Batch(SRC, TGT, pad=pad)
    theirs = AnnotatedBatch(torch.tensor(SRC), torch.tensor(TGT), pad=pad)
    equal(ours.src, theirs.src)
    equal(ours.src_mask, theirs.src_mask)
    equal(ours.tgt, theirs.tgt)
    equal(ours.tgt_y, theirs.tgt_y)
    equal(ours.tgt_mask, theirs.tgt_mask)
    assert isinstance(ours.ntokens, int) and ours.ntokens == int(theirs.ntokens)
    assert ours.src_mask.shape == (3, 1, 7) and ours.tgt_mask.shape == (3, 7, 7)


def test_batch_default_pad_and_no_target():
    ours = Batch(SRC.astype(np.int32))
    theirs = AnnotatedBatch(torch.tensor(SRC))
    equal(ours.src_mask, theirs.src_mask)
    assert not hasattr(ours, "tgt") and not hasattr(ours, "tgt_mask") and not hasattr(ours, "ntokens")


def test_make_std_mask_equals_the_annotated_transformers():
    equal(Batch.make_std_mask(TGT, 2), AnnotatedBatch.make_std_mask(torch.tensor(TGT), 2))


def test_batch_bad_input():
    with pytest.raises(TypeError, match="Batch: src must be an integer array"):
        Batch(SRC.astype(np.float32))
    with pytest.raises(ValueError, match=r"Batch: src must have shape \(batch, length\)"):
        Batch(SRC[0])
    with pytest.raises(ValueError, match="tgt needs at least 2 positions"):
        Batch(SRC, TGT[:, :1])
    with pytest.raises(TypeError, match="subsequent_mask: size must be an int"):
        subsequent_mask(3.0)
    with pytest.raises(ValueError, match="size must be >= 0"):
        subsequent_mask(-1)
