"""The Annotated Transformer's LabelSmoothing and SimpleLossCompute against the blog post's own classes run
in torch.

true_dist is compared exactly (both fill with the same float32 values); the loss rtol 1e-5,
atol 1e-6 (a float32 sum in torch, a double one here); gradients rtol 1e-5, atol 1e-7.
"""
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import ctransformer as ct
from ctransformer.annotated import LabelSmoothing, SimpleLossCompute
from helpers import assert_close, rand


class AnnotatedLabelSmoothing(nn.Module):
    """The Annotated Transformer's LabelSmoothing (002_5b1a8dee14bb0756.txt), verbatim apart from the comments."""

    def __init__(self, size, padding_idx, smoothing=0.0):
        super(AnnotatedLabelSmoothing, self).__init__()
        self.criterion = nn.KLDivLoss(reduction="sum")
        self.padding_idx = padding_idx
        self.confidence = 1.0 - smoothing
        self.smoothing = smoothing
        self.size = size
        self.true_dist = None

    def forward(self, x, target):
        assert x.size(1) == self.size
        true_dist = x.data.clone()
        true_dist.fill_(self.smoothing / (self.size - 2))
        true_dist.scatter_(1, target.data.unsqueeze(1), self.confidence)
        true_dist[:, self.padding_idx] = 0
        mask = torch.nonzero(target.data == self.padding_idx)
        if mask.dim() > 0:
            true_dist.index_fill_(0, mask.squeeze(), 0.0)
        self.true_dist = true_dist
        return self.criterion(x, true_dist.clone().detach())


class AnnotatedSimpleLossCompute:
    """The Annotated Transformer's SimpleLossCompute as the blog post writes it, verbatim."""

    def __init__(self, criterion):
        self.criterion = criterion

    def __call__(self, x, y, norm):
        sloss = (
                self.criterion(
                    x.contiguous().view(-1, x.size(-1)), y.contiguous().view(-1)
                ) / norm
        )
        return sloss.data * norm, sloss


def test_blog_example():
    """LabelSmoothing(5, 0, 0.4) on five rows [0, 0.2, 0.7, 0.1, 0] with targets [2, 1, 0, 3, 3]."""
    predict = np.array([[0, 0.2, 0.7, 0.1, 0]] * 5, dtype=np.float32)
    target = np.array([2, 1, 0, 3, 3])
    crit, ref = LabelSmoothing(5, 0, 0.4), AnnotatedLabelSmoothing(5, 0, 0.4)
    assert crit.true_dist is None
    loss = crit(x=ct.tensor(predict), target=target)
    expected = ref(x=torch.FloatTensor(predict), target=torch.LongTensor(target))
    np.testing.assert_array_equal(crit.true_dist, ref.true_dist.numpy())
    assert crit.true_dist.dtype == np.float32 and crit.true_dist.shape == (5, 5)
    assert loss.shape == () and isinstance(loss, ct.Tensor)
    assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    # the figure: row 2 (target = padding) all zero, column 0 all zero, 0.6 at the target
    assert crit.true_dist[2].sum() == 0 and crit.true_dist[:, 0].sum() == 0
    assert crit.true_dist[0, 2] == np.float32(0.6) and crit.true_dist[0, 1] == np.float32(0.4 / 3)


@pytest.mark.parametrize("size,padding_idx,smoothing", [(11, 0, 0.1), (11, 3, 0.3), (7, 6, 0.0), (40, 2, 0.1)])
def test_loss_and_gradient_match_the_annotated_transformers(size, padding_idx, smoothing):
    """Log-probabilities from log_softmax of logits (as in training); loss, true_dist, and the
    gradient w.r.t. the log-probabilities and back through log_softmax to the logits."""
    n = 13
    logits = rand((n, size), seed=size + padding_idx)
    target = np.random.default_rng(padding_idx).integers(0, size, size=n)
    target[[1, 5]] = padding_idx  # rows to drop

    x = ct.tensor(logits, requires_grad=True)
    tx = torch.tensor(logits, requires_grad=True)
    logp = ct.functional.log_softmax(x, -1)
    tlogp = F.log_softmax(tx, dim=-1)
    tlogp.retain_grad()
    crit, ref = LabelSmoothing(size, padding_idx, smoothing), AnnotatedLabelSmoothing(size, padding_idx, smoothing)
    loss = crit(logp, target)
    expected = ref(tlogp, torch.tensor(target))
    np.testing.assert_array_equal(crit.true_dist, ref.true_dist.numpy())
    assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    expected.backward()
    loss.backward()
    assert_close(x.grad, tx.grad, rtol=1e-5, atol=1e-7, what="d loss / d logits")

    leaf = ct.tensor(tlogp.detach().numpy(), requires_grad=True)
    crit(leaf, target).backward()
    assert_close(leaf.grad, tlogp.grad, rtol=1e-5, atol=1e-7, what="d loss / d log-probabilities")
    assert np.all(leaf.grad.numpy()[[1, 5]] == 0)


def test_penalization_example():
    """The blog's last plot: LabelSmoothing(5, 0, 0.1), prediction [0, x/d, 1/d, 1/d, 1/d] with
    d = x + 3 through log_softmax (dim=1, as F.log_softmax picks for 2-d input), target 1."""
    crit, ref = LabelSmoothing(5, 0, 0.1), AnnotatedLabelSmoothing(5, 0, 0.1)
    ours, theirs = [], []
    for x in range(1, 100):
        d = x + 3 * 1
        predict = np.array([[0, x / d, 1 / d, 1 / d, 1 / d]], dtype=np.float32)
        ours.append(crit(ct.functional.log_softmax(ct.tensor(predict), 1), np.array([1])).item())
        theirs.append(ref(F.log_softmax(torch.FloatTensor(predict), dim=1), torch.LongTensor([1])).item())
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    assert ours[0] > ours[-1]  # the loss falls as the model grows confident in the right class


def test_no_grad_input_and_true_dist_is_a_copy():
    crit = LabelSmoothing(6, 1, 0.2)
    loss = crit(ct.tensor(rand((3, 6))), np.array([0, 1, 5], dtype=np.int32))
    assert loss.grad_fn is None
    td = crit.true_dist
    td[:] = 7.0
    assert crit.true_dist.max() < 1.0
    assert (crit.size, crit.padding_idx, crit.smoothing) == (6, 1, 0.2)
    assert crit.confidence == 1.0 - 0.2


def test_label_smoothing_bad_input():
    crit = LabelSmoothing(5, 0, 0.4)
    x = ct.tensor(rand((4, 5)))
    with pytest.raises(ValueError, match=r"x must be log-probabilities of shape \(N, size=5\), got \(4, 6\)"):
        crit(ct.tensor(rand((4, 6))), np.array([1, 2, 3, 4]))
    with pytest.raises(ValueError, match="got \\(5,\\)"):
        crit(ct.tensor(rand((5,))), np.array([1]))
    with pytest.raises(ValueError, match=r"target must have shape \(4,\)"):
        crit(x, np.array([1, 2]))
    with pytest.raises(IndexError, match=r"target\[2\] = 5 is out of range for size 5"):
        crit(x, np.array([1, 2, 5, 0]))
    with pytest.raises(IndexError, match="target\\[0\\] = -1"):
        crit(x, np.array([-1, 2, 3, 0]))
    with pytest.raises(TypeError, match="target: expected an integer array"):
        crit(x, np.array([1.0, 2.0, 3.0, 0.0]))
    with pytest.raises(ValueError, match="size must be > 2"):
        LabelSmoothing(2, 0, 0.1)
    with pytest.raises(IndexError, match="padding_idx must be in \\[0, 4\\]"):
        LabelSmoothing(5, 5, 0.1)
    with pytest.raises(ValueError, match="smoothing must be in \\[0, 1\\]"):
        LabelSmoothing(5, 0, 1.5)
    with pytest.raises(TypeError, match="size must be a non-negative int"):
        LabelSmoothing(5.0, 0, 0.1)


# --- SimpleLossCompute ---------------------------------------------------------------------------

def test_simple_loss_compute_criterion_only_form():
    """The blog post's SimpleLossCompute(criterion) on (b, l, vocab) log-probabilities."""
    logits = rand((2, 4, 9), seed=11)
    y = np.array([[1, 2, 3, 0], [4, 0, 0, 0]])
    norm = int((y != 0).sum())
    x = ct.tensor(logits, requires_grad=True)
    tx = torch.tensor(logits, requires_grad=True)
    value, sloss = SimpleLossCompute(LabelSmoothing(9, 0, 0.1))(ct.functional.log_softmax(x, -1), y, norm)
    theirs = AnnotatedSimpleLossCompute(AnnotatedLabelSmoothing(9, 0, 0.1))
    tvalue, tsloss = theirs(F.log_softmax(tx, -1), torch.tensor(y), norm)
    assert isinstance(value, float)
    assert value == pytest.approx(tvalue.item(), rel=1e-5)
    assert_close(sloss, tsloss, rtol=1e-5, atol=1e-6)
    sloss.backward()
    tsloss.backward()
    assert_close(x.grad, tx.grad, rtol=1e-5, atol=1e-7)


def test_simple_loss_compute_with_generator():
    """SimpleLossCompute(generator, criterion) as The Annotated Transformer: generator = log_softmax
    of a Linear, applied to the decoder output; gradients reach the generator's weights."""
    out, w, b = rand((2, 3, 6), seed=1), rand((8, 6), seed=2, scale=0.3), rand((8,), seed=3)
    y = np.array([[1, 2, 0], [3, 3, 3]])
    cw, cb = ct.tensor(w, requires_grad=True), ct.tensor(b, requires_grad=True)
    tw, tb = torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)
    compute = SimpleLossCompute(lambda h: ct.functional.log_softmax(ct.functional.linear(h, cw, cb), -1),
                                LabelSmoothing(8, 0, 0.1))
    value, sloss = compute(ct.tensor(out), y, 5)
    tx = F.log_softmax(F.linear(torch.tensor(out), tw, tb), -1)
    tvalue, tsloss = AnnotatedSimpleLossCompute(AnnotatedLabelSmoothing(8, 0, 0.1))(tx, torch.tensor(y), 5)
    assert value == pytest.approx(tvalue.item(), rel=1e-5)
    sloss.backward()
    tsloss.backward()
    assert_close(cw.grad, tw.grad, rtol=1e-5, atol=1e-7)
    assert_close(cb.grad, tb.grad, rtol=1e-5, atol=1e-7)


def test_simple_loss_compute_bad_input():
    with pytest.raises(TypeError, match="criterion must be callable"):
        SimpleLossCompute(None, 3)
    with pytest.raises(TypeError, match="generator must be callable"):
        SimpleLossCompute(3, LabelSmoothing(5, 0))
    with pytest.raises(ValueError, match="norm is 0"):
        SimpleLossCompute(LabelSmoothing(5, 0))(ct.tensor(rand((1, 2, 5))), np.array([[0, 0]]), 0)
