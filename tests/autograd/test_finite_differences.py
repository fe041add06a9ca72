"""Backward formulas checked against the maths, independently of torch's float32 kernels.

Two checks per op, on well-scaled inputs (entries of order 1):

1. float64 reference (preferred): torch evaluates the same function in float64 on our float32
   inputs and differentiates it; float64 is an independent, essentially exact reference of the
   maths. Our float32 gradient must match it to rtol 1e-5, atol 1e-6 * (gradient scale), the
   accuracy a float32 computation of a few dozen operations can reach.

2. Central differences of our own forward: dL/dx_i ~ (L(x + h e_i) - L(x - h e_i)) / 2h with
   L = sum(out * g) for a random g, h = 1e-2, evaluated by ctransformer in float32 (the loss is
   summed in float64). Error budget: truncation h^2/6 * |L'''| ~ 2e-5 * |L'''| (|L'''| of order 1
   on these inputs), plus rounding eps32 * sqrt(N) * |out * g| / h ~ 1e-4 at worst (eps32 = 1.2e-7,
   N <= 60 outputs of order 1); the worst error seen is 6e-5. Tolerance:
   |fd - grad| <= 2e-4 + 2e-4 * |grad|. A formula 1% off fails it (last test).
"""
import numpy as np
import pytest
import torch

import ctransformer as ct
from helpers import assert_close, rand
from upstream import upstream

F = ct.functional
H = 1e-2
FD_RTOL = FD_ATOL = 2e-4  # see the module docstring


def float64_check(ct_fn, torch_fn, arrays, seed, rtol=1e-5, atol=1e-6, equal_nan=False):
    """Our float32 gradients of sum(f(*arrays) * g) against torch float64's, for each array."""
    ours = [ct.tensor(a, requires_grad=True) for a in arrays]
    ref = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    out, tout = ct_fn(*ours), torch_fn(*ref)
    g = upstream(tuple(tout.shape), seed)
    assert_close(out, tout.detach().float(), rtol=rtol, atol=atol, equal_nan=equal_nan, what="forward vs float64")
    out.backward(ct.tensor(g))
    tout.backward(torch.from_numpy(g.astype(np.float64)))
    for i, (a, b) in enumerate(zip(ours, ref)):
        scale = max(1.0, float(np.nanmax(np.abs(b.grad.numpy()))))
        assert_close(a.grad, b.grad.float(), rtol=rtol, atol=atol * scale, equal_nan=equal_nan,
                     what=f"grad {i} vs float64")


def fd_check(ct_fn, arrays, seed):
    """Our backward against central differences of our own float32 forward."""
    ours = [ct.tensor(a, requires_grad=True) for a in arrays]
    out = ct_fn(*ours)
    g = upstream(out.shape, seed).astype(np.float64)
    out.backward(ct.tensor(g.astype(np.float32)))

    def loss(args):
        with ct.no_grad():
            return float((ct_fn(*[ct.tensor(a) for a in args]).numpy().astype(np.float64) * g).sum())

    for i, a in enumerate(arrays):
        fd = np.zeros(a.shape)
        for j in range(a.size):
            plus = [x.copy() for x in arrays]
            minus = [x.copy() for x in arrays]
            plus[i].flat[j] += H
            minus[i].flat[j] -= H
            fd.flat[j] = (loss(plus) - loss(minus)) / (2 * H)
        np.testing.assert_allclose(ours[i].grad.numpy(), fd, rtol=FD_RTOL, atol=FD_ATOL, err_msg=f"grad {i} vs fd")


# ---- layer_norm ----------------------------------------------------------------------------

def ln_ct(x, w, b):
    return F.layer_norm(x, w, b, 1e-5)


def ln_torch(x, w, b):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


@pytest.mark.parametrize("shape", [(3, 5), (2, 2, 8), (4, 2)])
def test_layer_norm(shape):
    D = shape[-1]
    arrays = [rand(shape, seed=1), rand((D,), seed=2) + 1.0, rand((D,), seed=3)]
    float64_check(ln_ct, ln_torch, arrays, seed=4)
    fd_check(ln_ct, arrays, seed=5)


# ---- softmax / log_softmax ---------------------------------------------------------------

@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("log", [False, True])
def test_softmax(dim, log):
    arrays = [rand((3, 4, 2), seed=6)]
    ct_fn = (lambda x: F.log_softmax(x, dim)) if log else (lambda x: F.softmax(x, dim))
    torch_fn = (lambda x: torch.log_softmax(x, dim)) if log else (lambda x: torch.softmax(x, dim))
    float64_check(ct_fn, torch_fn, arrays, seed=7)
    fd_check(ct_fn, arrays, seed=8)


# ---- gelu ------------------------------------------------------------------------------------

def test_gelu():
    arrays = [np.linspace(-4, 4, 41, dtype=np.float32)]
    float64_check(F.gelu, lambda x: torch.nn.functional.gelu(x, approximate="tanh"), arrays, seed=9)
    fd_check(F.gelu, arrays, seed=10)


# ---- cross_entropy with label smoothing ---------------------------------------------------

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.1, 0.4])
def test_cross_entropy_label_smoothing(reduction, smoothing):
    target = np.array([2, 0, 4, 0, 1])
    ignore = 0
    ct_fn = lambda x: F.cross_entropy(x, target, ignore_index=ignore, reduction=reduction, label_smoothing=smoothing)
    torch_fn = lambda x: torch.nn.functional.cross_entropy(
        x, torch.from_numpy(target), ignore_index=ignore, reduction=reduction, label_smoothing=smoothing)
    arrays = [rand((5, 6), seed=11, scale=2.0)]
    float64_check(ct_fn, torch_fn, arrays, seed=12)
    fd_check(ct_fn, arrays, seed=13)


# ---- attention -------------------------------------------------------------------------------

MASK = np.array([[[True, True, True, False]], [[True, True, False, False]]])  # (b, 1, Lk)


def attn_ct(q, k, v):
    out, attn = F.scaled_dot_product_attention(q, k, v, mask=MASK, fill_value=-1e9)
    return out + F.matmul(attn, attn.transpose(-1, -2)).sum(-1, keepdim=True)  # both outputs count


def attn_torch(q, k, v):
    scores = torch.matmul(q / q.shape[-1] ** 0.5, k.transpose(-2, -1)).masked_fill(torch.from_numpy(MASK) == 0, -1e9)
    attn = torch.softmax(scores, -1)
    return attn @ v + (attn @ attn.transpose(-1, -2)).sum(-1, keepdim=True)


def test_attention():
    arrays = [rand((2, 3, 4), seed=14), rand((2, 4, 4), seed=15), rand((2, 4, 2), seed=16)]
    float64_check(attn_ct, attn_torch, arrays, seed=17)
    fd_check(attn_ct, arrays, seed=18)


def test_a_wrong_gradient_would_be_caught():
    """The finite-difference check is sharp enough: a gradient 1% off fails it."""
    arrays = [rand((3, 5), seed=19)]
    bad = lambda x: F.layer_norm(x) * 1.0
    ours = ct.tensor(arrays[0], requires_grad=True)
    out = bad(ours)
    g = rand(out.shape, seed=20)
    out.backward(ct.tensor(g))
    with ct.no_grad():
        def loss(a):
            return float((bad(ct.tensor(a)).numpy().astype(np.float64) * g).sum())
        fd = np.zeros((3, 5))
        for j in range(15):
            p, m = arrays[0].copy(), arrays[0].copy()
            p.flat[j] += H
            m.flat[j] -= H
            fd.flat[j] = (loss(p) - loss(m)) / (2 * H)
    np.testing.assert_allclose(ours.grad.numpy(), fd, rtol=FD_RTOL, atol=FD_ATOL)
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(ours.grad.numpy() * 1.01, fd, rtol=FD_RTOL, atol=FD_ATOL)
