"""Moving weights between ctransformer and torch modules, and comparing gradients parameter by parameter."""
import numpy as np
import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def single_threaded_torch():
    """The references run torch on one thread, restored afterwards. Their matrices are small (tens of
    rows), and on this shared 2-vCPU machine torch's two spinning OpenMP threads made the base-size
    reference runs 4x slower (22 s vs 5 s) whenever other work held a core. Only the reduction order
    changes, which the tolerances already allow for."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def torch_to_ct(torch_module, ct_module):
    """Load torch's state dict (tied names included) into the ctransformer module."""
    ct_module.load_state_dict({k: v.detach().numpy() for k, v in torch_module.state_dict().items()})


def ct_to_torch(ct_module, torch_module):
    torch_module.load_state_dict({k: torch.from_numpy(v) for k, v in ct_module.state_dict().items()})


def assert_state_dict_layout(ct_module, torch_module):
    """Same names, in the same order, with the same shapes."""
    ours = ct_module.state_dict()
    theirs = torch_module.state_dict()
    assert list(ours) == list(theirs)
    for name, value in theirs.items():
        assert ours[name].shape == tuple(value.shape), name


def float64_copy(torch_module, build):
    """A float64 twin of torch_module: build() makes a fresh module of the same class and sizes, which
    gets torch_module's weights. Its gradients are the yardstick for float32 rounding: both libraries
    can then be measured against (nearly) exact arithmetic rather than only against each other."""
    twin = build().double().eval()
    twin.load_state_dict(torch_module.state_dict())
    return twin


def grad_errors(ct_module, torch_module):
    """{name: (max |g_ct - g_torch|, max |g_torch|)} over every parameter, named as torch names it
    (a tied weight once, under its first name; both libraries list the same names)."""
    theirs = dict(torch_module.named_parameters())
    ours = ct_module.named_parameters()
    assert [n for n, _ in ours] == list(theirs)
    out = {}
    for name, p in ours:
        expected = theirs[name].grad
        assert p.grad is not None and expected is not None, name
        g, e = p.grad.numpy(), expected.numpy()
        assert g.shape == e.shape, name
        out[name] = (float(np.abs(g - e).max()), float(np.abs(e).max()))
    return out


def assert_grads_close(ct_module, torch_module, rel, floor=1e-6):
    """Per parameter: max|g_ct - g_torch| <= rel * max|g_torch| + floor * (largest gradient of the model).

    The criterion is relative to each tensor's largest entry rather than elementwise: float32 sums over
    hundreds of terms in a different order (OpenBLAS vs torch's kernels) leave an absolute error that
    scales with the tensor's magnitude, not with each tiny entry. The floor covers gradients that are
    zero in exact arithmetic and only rounding noise in both libraries (a key projection's bias: the
    softmax ignores a shift shared by a row's scores).
    Returns the worst rel error seen, for the record."""
    errors = grad_errors(ct_module, torch_module)
    scale = max(m for _, m in errors.values())
    worst = 0.0
    for name, (err, mag) in errors.items():
        assert err <= rel * mag + floor * scale, f"{name}: max abs error {err:.3g}, max |grad| {mag:.3g}"
        if mag > floor * scale * 1e3:
            worst = max(worst, err / mag)
    return worst
