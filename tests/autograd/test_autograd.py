"""The autograd engine and the Tensor handle, against torch's behaviour.

Values compared with torch use rtol 1e-6 (the same few float32 operations on both sides);
structural facts (None, shapes, errors, sharing) are exact.
"""
import gc

import numpy as np
import pytest
import torch

import ctransformer as ct
from helpers import assert_close, pair, rand
from upstream import upstream

F = ct.functional


def test_grad_is_none_before_backward_and_after_zero_grad():
    x = ct.tensor(rand((2, 3), seed=1), requires_grad=True)
    assert x.grad is None and x.is_leaf and x.grad_fn is None
    y = (x * x).sum()
    assert x.grad is None and not y.is_leaf and y.grad_fn == "sum"
    y.backward()
    assert x.grad is not None and x.grad.shape == (2, 3)
    x.zero_grad()
    assert x.grad is None


def test_gradients_accumulate_across_backward_calls_like_torch():
    x, tx = pair(rand((3, 4), seed=2))
    for seed in (3, 4):
        g = rand((3, 4), seed=seed)
        (x * x).backward(ct.tensor(g))
        (tx * tx).backward(torch.from_numpy(g))
    assert_close(x.grad, tx.grad, rtol=1e-6, atol=1e-6, what="accumulated grad")
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy() * (rand((3, 4), seed=3) + rand((3, 4), seed=4)),
                               rtol=1e-6)


def test_a_tensor_used_several_times_gets_the_sum():
    x, tx = pair(rand((4,), seed=5))
    w, tw = pair(rand((4,), seed=6))
    out = x * w + F.relu(x) - x / (w * w + 1.0) + F.softmax(x, 0) * x
    tout = tx * tw + torch.relu(tx) - tx / (tw * tw + 1.0) + torch.softmax(tx, 0) * tx
    g = upstream((4,), 7)
    out.backward(ct.tensor(g))
    tout.backward(torch.from_numpy(g))
    assert_close(x.grad, tx.grad, rtol=1e-6, atol=1e-6, what="x used five times")
    assert_close(w.grad, tw.grad, rtol=1e-6, atol=1e-6, what="w used three times")


def test_diamond_graph_intermediate_used_twice():
    """h feeds two branches that meet again: its node must run once, after both branches."""
    x, tx = pair(rand((3, 3), seed=8))
    h, th = F.gelu(x), torch.nn.functional.gelu(tx, approximate="tanh")
    out = (h @ h + F.softmax(h, -1)).sum()
    tout = (th @ th + torch.softmax(th, -1)).sum()
    out.backward()
    tout.backward()
    assert_close(x.grad, tx.grad, rtol=1e-5, atol=1e-6, what="diamond")


def test_backward_with_grad_equals_weighted_sum():
    """out.backward(g) is (out * g).sum().backward(), exactly."""
    a = ct.tensor(rand((2, 5), seed=9), requires_grad=True)
    b = ct.tensor(a.numpy(), requires_grad=True)
    g = rand((2, 5), seed=10)
    F.gelu(a).backward(ct.tensor(g))
    (F.gelu(b) * ct.tensor(g)).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())
    # grad may also be a NumPy array
    c = ct.tensor(a.numpy(), requires_grad=True)
    F.gelu(c).backward(g)
    np.testing.assert_array_equal(c.grad.numpy(), a.grad.numpy())


def test_backward_on_a_leaf():
    x = ct.tensor(rand((3,), seed=11), requires_grad=True)
    g = rand((3,), seed=12)
    x.backward(ct.tensor(g))
    np.testing.assert_array_equal(x.grad.numpy(), g)


def test_backward_on_non_scalar_without_grad_raises():
    x = ct.tensor(rand((2, 3), seed=13), requires_grad=True)
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for one-element outputs"):
        (x * 2.0).backward()
    with pytest.raises(ValueError, match="grad must have the output's shape"):
        (x * 2.0).backward(ct.ones((3, 2)))


def test_backward_without_requires_grad_raises():
    x = ct.tensor(rand((2,), seed=14))
    with pytest.raises(RuntimeError, match="does not require grad"):
        (x * 2.0).sum().backward()


def test_second_backward_through_a_freed_graph_raises():
    x = ct.tensor(rand((2, 3), seed=15), requires_grad=True)
    h = F.softmax(x, -1)
    y = (h * h).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()
    z = (h * 3.0).sum()  # a new op on a freed intermediate
    with pytest.raises(RuntimeError, match="second time"):
        z.backward()
    (F.softmax(x, -1) * 3.0).sum().backward()  # recomputing the forward pass works again


def test_detach_shares_data_but_not_the_graph():
    x = ct.tensor(rand((3,), seed=16), requires_grad=True)
    y = x * 2.0
    d = y.detach()
    assert not d.requires_grad and d.grad_fn is None and d.is_leaf
    np.testing.assert_array_equal(d.numpy(), y.numpy())
    out = (d * x).sum()  # only the x branch carries a gradient
    out.backward()
    np.testing.assert_array_equal(x.grad.numpy(), d.numpy())
    assert d.grad is None
    d.numpy()[0] = 42.0  # shares storage with y
    assert y.numpy()[0] == 42.0


def test_no_grad_context_manager_builds_no_graph():
    x = ct.tensor(rand((2, 2), seed=17), requires_grad=True)
    assert ct.is_grad_enabled()
    with ct.no_grad():
        assert not ct.is_grad_enabled()
        y = F.linear(x, x) * 2.0
        assert not y.requires_grad and y.grad_fn is None
        with pytest.raises(RuntimeError, match="does not require grad"):
            y.sum().backward()
    assert ct.is_grad_enabled()
    assert (x * 2.0).requires_grad


def test_no_grad_restores_the_mode_after_an_exception_and_nests():
    with pytest.raises(ValueError):
        with ct.no_grad():
            raise ValueError("boom")
    assert ct.is_grad_enabled()
    with ct.no_grad():
        with ct.no_grad():
            pass
        assert not ct.is_grad_enabled()
    assert ct.is_grad_enabled()
    ct.set_grad_enabled(False)
    try:
        assert not (ct.tensor(rand((2,), seed=18), requires_grad=True) * 2.0).requires_grad
    finally:
        ct.set_grad_enabled(True)


def test_no_grad_decorator():
    @ct.no_grad()
    def step(t):
        """docstring kept"""
        return t * 3.0, ct.is_grad_enabled()

    x = ct.tensor(rand((2,), seed=19), requires_grad=True)
    y, enabled = step(x)
    assert not enabled and not y.requires_grad and ct.is_grad_enabled()
    assert step.__doc__ == "docstring kept"


def test_numpy_is_a_view_that_keeps_storage_alive():
    x = ct.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    a = x.numpy()
    assert a.dtype == np.float32 and a.shape == (2, 3)
    a[0, 0] = 10.0  # a view: writes reach the tensor
    assert x.numpy()[0, 0] == 10.0 and np.shares_memory(a, x.numpy())
    y = x * 2.0
    b = y.numpy()
    del x, y
    gc.collect()
    _ = [ct.tensor(np.full((2, 3), 7.0, np.float32)) for _ in range(50)]  # reuse freed memory, if any
    np.testing.assert_array_equal(a, [[10, 1, 2], [3, 4, 5]])
    np.testing.assert_array_equal(b, [[20, 2, 4], [6, 8, 10]])


def test_grad_numpy_outlives_the_tensor():
    x = ct.tensor(rand((3,), seed=20), requires_grad=True)
    (x * 4.0).sum().backward()
    g = x.grad.numpy()
    del x
    gc.collect()
    np.testing.assert_array_equal(g, np.full(3, 4.0, np.float32))


def test_repr():
    x = ct.tensor(np.array([[1.0, 2.5]], np.float32))
    assert repr(x) == "tensor([[1. , 2.5]])"
    x.requires_grad = True
    assert repr(x) == "tensor([[1. , 2.5]], requires_grad=True)"
    assert repr(x * 2.0) == "tensor([[2., 5.]], grad_fn=<scalar>)"
    assert repr(F.relu(x)).endswith("grad_fn=<relu>)")


def test_requires_grad_setter():
    x = ct.tensor(rand((2,), seed=21))
    assert not x.requires_grad
    x.requires_grad = True
    assert x.requires_grad
    (x * x).sum().backward()
    assert x.grad is not None
    y = x * 2.0
    with pytest.raises(RuntimeError, match="only leaf tensors"):
        y.requires_grad = False
    assert x.requires_grad_(False) is not None and not x.requires_grad
    assert not (x * 2.0).requires_grad


def test_tensor_copies_and_constructors():
    src = rand((2, 2), seed=22)
    x = ct.tensor(src)
    src[0, 0] = 99.0
    assert x.numpy()[0, 0] != 99.0, "ct.tensor copies its input"
    y = ct.tensor(x, requires_grad=True)
    assert y.requires_grad and not np.shares_memory(y.numpy(), x.numpy())
    assert ct.tensor(np.float64(1.5)).shape == () and ct.tensor(np.float64(1.5)).item() == 1.5
    assert ct.tensor([1.0, 2.0]).shape == (2,)
    assert ct.zeros((2, 3)).numpy().sum() == 0 and ct.ones((4,)).numpy().sum() == 4
    assert ct.zeros((2, 3), requires_grad=True).requires_grad
    z = ct.tensor(rand((2, 3, 4), seed=23))
    assert z.ndim == 3 and z.dim() == 3 and z.numel() == 24 and len(z) == 2 and z.dtype == np.float32
    assert float(ct.tensor(np.array([2.0]))) == 2.0


def test_a_long_graph_is_freed_and_differentiated_without_recursion():
    """Dropping a 200k-op graph that never ran backward used to overflow the C++ stack
    (recursive node destructors): a segfault. Backward through it is iterative too."""
    x = ct.tensor(np.ones(3, np.float32), requires_grad=True)
    y = x
    for _ in range(200_000):
        y = y * 1.0
    del y  # must not crash
    y = x
    for _ in range(100_000):
        y = y + 0.0
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones(3, np.float32))


def test_graph_with_a_tensor_used_twice_in_one_op_is_freed():
    x = ct.tensor(np.ones(2, np.float32), requires_grad=True)
    y = x
    for _ in range(100_000):
        y = y * y
    del y


def test_numpy_array_of_a_tensor():
    x = ct.tensor(rand((2, 2), seed=24))
    np.testing.assert_array_equal(np.asarray(x), x.numpy())
    assert np.asarray(x, dtype=np.float64).dtype == np.float64


def test_grad_fn_names():
    x = ct.tensor(rand((2, 1), seed=25), requires_grad=True)
    assert F.mean(x, 1).grad_fn == "mean"  # a mean over one element is still a mean
    assert F.sum(x, 1).grad_fn == "sum" and x.mean().grad_fn == "mean"
    assert F.matmul(x, x.transpose(0, 1)).grad_fn == "matmul"
    assert F.softmax(x, 0).grad_fn == "softmax" and F.log_softmax(x, 0).grad_fn == "log_softmax"
    assert F.layer_norm(x).grad_fn == "layer_norm" and F.gelu(x).grad_fn == "gelu"
