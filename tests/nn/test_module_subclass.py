"""A model written in Python as a subclass of ctransformer.nn.Module, as one writes a torch.nn.Module.

The same model in both libraries (two Linear layers, a nested block, a LayerNorm, a Parameter and a
buffer): the same state_dict names in the same order, the same outputs and gradients from the same
weights, and the same weights after an Adam step taken over ``parameters()``. No ReLU, so no knife edge:
every value is a smooth function of the weights.

Tolerances: outputs and input gradients elementwise rtol 1e-5, atol 1e-6 (sums of at most 16 terms and
a LayerNorm); parameter gradients relative to each tensor's largest (assert_grads_close, rel 1e-5); the
weights after one Adam step (lr 1e-2) atol 1e-6: Adam's step is lr * m / (sqrt(v) + eps), about lr per
entry whatever the gradient's rounding, so the weights differ by rounding of a 1e-2 step.
"""
import numpy as np
import pytest
import torch

import ctransformer as ct
from helpers import assert_close, rand
from reference.parity import (  # noqa: F401 (single_threaded_torch is an autouse fixture)
    assert_grads_close, ct_to_torch, single_threaded_torch, torch_to_ct,
)


class TorchBlock(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = torch.nn.Linear(d, d)
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(x + self.proj(x))


class TorchNet(torch.nn.Module):
    def __init__(self, d_in=6, d=16, d_out=3):
        super().__init__()
        self.fc1 = torch.nn.Linear(d_in, d)
        self.scale = torch.nn.Parameter(torch.linspace(0.5, 1.5, d))
        self.register_buffer("shift", torch.full((d,), 0.25))
        self.block = TorchBlock(d)
        self.fc2 = torch.nn.Linear(d, d_out)

    def forward(self, x):
        return self.fc2(self.block(self.fc1(x) * self.scale + self.shift))


class Block(ct.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = ct.nn.Linear(d, d)
        self.norm = ct.nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(x + self.proj(x))


class Net(ct.nn.Module):
    def __init__(self, d_in=6, d=16, d_out=3):
        super().__init__()
        self.fc1 = ct.nn.Linear(d_in, d)
        self.scale = ct.nn.Parameter(np.linspace(0.5, 1.5, d, dtype=np.float32))
        self.register_buffer("shift", ct.tensor(np.full(d, 0.25, np.float32)))
        self.block = Block(d)
        self.fc2 = ct.nn.Linear(d, d_out)

    def forward(self, x):
        return self.fc2(self.block(self.fc1(x) * self.scale + self.shift))


def twins():
    torch.manual_seed(0)
    reference = TorchNet()
    model = Net()
    torch_to_ct(reference, model)
    return model, reference


def test_names_and_order_are_torchs():
    model, reference = twins()
    assert list(model.state_dict()) == list(reference.state_dict())
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in reference.named_parameters()]
    assert [n for n, _ in model.named_buffers()] == [n for n, _ in reference.named_buffers()]
    assert [n for n, _ in model.named_children()] == [n for n, _ in reference.named_children()]
    assert model.num_parameters() == sum(p.numel() for p in reference.parameters())
    assert repr(model).startswith("Net(\n  (fc1): Linear()")
    assert "(block): Block(\n    (proj): Linear()" in repr(model)


def test_forward_and_gradients_match_torch():
    model, reference = twins()
    x = rand((5, 6), seed=1)
    weights = rand((5, 3), seed=2)
    xc, xt = ct.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, expected = model(xc), reference(xt)
    assert_close(out, expected.detach().numpy(), what="output")
    (out * ct.tensor(weights)).sum().backward()
    (expected * torch.from_numpy(weights)).sum().backward()
    assert_close(xc.grad, xt.grad.numpy(), what="input gradient")
    assert_grads_close(model, reference, rel=1e-5)
    assert model.scale.grad is not None and model.shift.grad is None


def test_an_adam_step_over_parameters_matches_torch():
    model, reference = twins()
    optimizer = ct.optim.Adam(model.parameters(), lr=1e-2)
    torch_optimizer = torch.optim.Adam(reference.parameters(), lr=1e-2)
    x = rand((4, 6), seed=3)
    for _ in range(2):
        optimizer.zero_grad()
        torch_optimizer.zero_grad()
        model(ct.tensor(x)).sum().backward()
        reference(torch.from_numpy(x)).sum().backward()
        optimizer.step()
        torch_optimizer.step()
    for name, value in reference.state_dict().items():
        assert_close(model.state_dict()[name], value.numpy(), rtol=0, atol=1e-6, what=name)
    assert_close(model.scale, model.state_dict()["scale"], rtol=0, atol=0, what="the attribute is the parameter")


def test_state_dict_moves_both_ways():
    model, reference = twins()
    fresh = TorchNet()
    ct_to_torch(model, fresh)
    for name, value in reference.state_dict().items():
        np.testing.assert_array_equal(fresh.state_dict()[name].numpy(), value.numpy())
    other = Net()
    result = other.load_state_dict(model.state_dict())
    assert not result.missing_keys and not result.unexpected_keys
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(other.state_dict()[name], value)
    np.testing.assert_array_equal(other.shift.numpy(), model.shift.numpy())   # loaded in place: the attribute sees it


def test_train_eval_quantize_and_zero_grad_reach_the_members():
    class WithDropout(ct.nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = ct.nn.Dropout(0.5)
            self.inner = Net()

        def forward(self, x):
            return self.inner(self.drop(x))

    model = WithDropout()
    assert model.training and model.drop.training and model.inner.block.norm.training
    model.eval()
    assert not model.training and not model.drop.training and not model.inner.block.norm.training
    x = rand((2, 6), seed=4)
    np.testing.assert_array_equal(model(ct.tensor(x)).numpy(), model.inner(ct.tensor(x)).numpy())
    model.inner(ct.tensor(x)).sum().backward()
    assert model.inner.fc1.weight.grad is not None
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    model.quantize("int8")
    assert model.quantization == "int8" and model.inner.fc2.int8_weight is not None
    model.dequantize()
    assert model.quantization is None


def test_setting_again_replaces_in_place_and_none_or_del_forgets():
    model = Net()
    order = list(model.state_dict())
    model.fc1 = ct.nn.Linear(6, 16, bias=False)           # a child set again keeps its place
    assert list(model.state_dict()) == [n for n in order if n != "fc1.bias"]
    model.scale = ct.nn.Parameter(np.zeros(16, np.float32))
    assert list(model.state_dict())[0] == "scale" and not model.state_dict()["scale"].any()
    model.shift = ct.tensor(np.ones(16, np.float32))       # a tensor on a buffer's name replaces the buffer
    assert model.state_dict()["shift"].tolist() == [1.0] * 16
    model.block = None
    assert not any(n.startswith("block.") for n in model.state_dict()) and model.block is None
    del model.fc2
    assert not any(n.startswith("fc2.") for n in model.state_dict()) and not hasattr(model, "fc2")
    model.note = "plain attributes stay plain"
    assert model.note == "plain attributes stay plain" and "note" not in model.state_dict()
    model.tied = model.fc1.weight                          # a parameter under two names: one tensor, listed once
    assert "tied" in model.state_dict() and "fc1.weight" in model.state_dict()
    assert sum(p.numel() for p in model.parameters()) == model.num_parameters() == 16 + 16 * 6


def test_buffers_persistent_or_not():
    class WithBuffers(ct.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("kept", ct.zeros([2]))
            self.register_buffer("scratch", ct.zeros([3]), persistent=False)

    model = WithBuffers()
    assert list(model.state_dict()) == ["kept"]
    assert [n for n, _ in model.named_buffers()] == ["kept", "scratch"]
    model.scratch = ct.ones([3])                            # keeps being non-persistent
    assert list(model.state_dict()) == ["kept"] and model.scratch.numpy().tolist() == [1.0] * 3


def test_bad_members_and_subclasses_raise_clear_errors():
    model = Net()
    with pytest.raises(TypeError, match="cannot assign int as child module 'fc1'"):
        model.fc1 = 3
    with pytest.raises(TypeError, match="cannot assign ndarray as parameter 'scale'"):
        model.scale = np.zeros(16)
    with pytest.raises(TypeError, match="cannot assign str as buffer 'shift'"):
        model.shift = "x"
    with pytest.raises(TypeError, match="parameter 'scale' must be a leaf tensor that requires grad"):
        model.scale = ct.zeros([16])
    with pytest.raises(TypeError, match="parameter 'scale' .* computed from others"):
        model.scale = ct.nn.Parameter(np.ones(16, np.float32)) * 2.0
    with pytest.raises(ValueError, match="hold no '.'"):
        model.register_buffer("a.b", ct.zeros([1]))
    with pytest.raises(TypeError, match="register_buffer: tensor must be a ctransformer Tensor or None, got ndarray"):
        model.register_buffer("b", np.zeros(1))
    with pytest.raises(TypeError, match="register_buffer: Linear's members are fixed in C\\+\\+"):
        ct.nn.Linear(2, 2).register_buffer("b", ct.zeros([1]))
    with pytest.raises(TypeError, match="add_module: module must be a ctransformer.nn.Module or None, got int"):
        model.add_module("m", 1)
    with pytest.raises(ValueError, match="cannot be its own child"):
        model.me = model
    assert list(model.state_dict()) == list(Net().state_dict())   # nothing above changed the model

    class NoForward(ct.nn.Module):
        pass

    with pytest.raises(NotImplementedError, match='Module \\[NoForward\\] is missing the required "forward" function'):
        NoForward()(ct.zeros([1]))

    class NoInit(ct.nn.Module):
        def __init__(self):
            self.fc = ct.nn.Linear(2, 2)

    with pytest.raises(AttributeError, match="cannot assign to NoInit before Module.__init__\\(\\) call"):
        NoInit()


def test_parameter_from_a_tensor_shares_its_data():
    t = ct.tensor(np.arange(3, dtype=np.float32))
    p = ct.nn.Parameter(t)
    assert p.requires_grad and p.is_leaf and not t.requires_grad
    p.numpy()[0] = 7.0
    assert t.numpy()[0] == 7.0
    frozen = ct.nn.Parameter(np.ones(2, np.float32), requires_grad=False)
    assert not frozen.requires_grad


def test_register_parameter_and_module_as_torch():
    model = ct.nn.Module()
    model.register_parameter("w", ct.nn.Parameter(np.ones((2, 2), np.float32)))
    model.register_module("lin", ct.nn.Linear(2, 2))
    assert list(model.state_dict()) == ["w", "lin.weight", "lin.bias"]
    assert isinstance(model.lin, ct.nn.Linear) and model.w.shape == (2, 2)
    model.register_parameter("w", None)
    assert list(model.state_dict()) == ["lin.weight", "lin.bias"] and model.w is None


def test_sequential_and_activations_match_torch():
    """Sequential(Linear, GELU, Linear, SiLU, Linear, ReLU): torch's names ("0.weight", "2.bias", ...) and, from
    the same weights, its outputs and gradients. ReLU last, on outputs kept off zero by the check below."""
    torch.manual_seed(1)
    reference = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.GELU(), torch.nn.Linear(8, 8), torch.nn.SiLU(),
                                    torch.nn.Linear(8, 4), torch.nn.ReLU())
    model = ct.nn.Sequential(ct.nn.Linear(5, 8), ct.nn.GELU(), ct.nn.Linear(8, 8), ct.nn.SiLU(), ct.nn.Linear(8, 4),
                             ct.nn.ReLU())
    assert list(model.state_dict()) == list(reference.state_dict())
    torch_to_ct(reference, model)
    x = rand((6, 5), seed=5)
    before_relu = reference[:-1](torch.from_numpy(x)).detach().numpy()
    assert np.abs(before_relu).min() > 1e-4, "an input of the ReLU is on float32's knife edge"
    out, expected = model(ct.tensor(x)), reference(torch.from_numpy(x))
    assert_close(out, expected.detach().numpy(), what="output")
    assert_close(model[:-1](ct.tensor(x)), before_relu, what="a slice is a Sequential of the same modules")
    out.sum().backward()
    expected.sum().backward()
    assert_grads_close(model, reference, rel=1e-5)
    assert isinstance(model[1], ct.nn.GELU) and len(model) == 6 and len(list(model)) == 6
    assert "(1): GELU()" in repr(model)
    tanh = ct.nn.GELU(approximate="tanh")(ct.tensor(x))
    assert_close(tanh, torch.nn.GELU(approximate="tanh")(torch.from_numpy(x)).numpy(), what="GELU tanh")
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh'"):
        ct.nn.GELU("erf")


def test_module_list_names_and_renumbers_as_torch():
    layers = ct.nn.ModuleList([ct.nn.Linear(2, 2) for _ in range(2)])
    layers.append(ct.nn.LayerNorm(2))
    layers.insert(0, ct.nn.Linear(2, 3))
    reference = torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(2)])
    reference.append(torch.nn.LayerNorm(2))
    reference.insert(0, torch.nn.Linear(2, 3))
    assert list(layers.state_dict()) == list(reference.state_dict())
    assert layers[0].out_features == 3 and isinstance(layers[-1], ct.nn.LayerNorm)
    assert [type(m).__name__ for m in layers[1:]] == ["Linear", "Linear", "LayerNorm"]

    class Stack(ct.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = ct.nn.ModuleList(ct.nn.Linear(3, 3) for _ in range(3))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    stack = Stack()
    assert [n for n, _ in stack.named_parameters()][:2] == ["layers.0.weight", "layers.0.bias"]
    assert stack.num_parameters() == 3 * 12
    with pytest.raises(TypeError, match="ModuleList.append: module must be a ctransformer.nn.Module, got int"):
        layers.append(3)
