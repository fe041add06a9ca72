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


# --- ReLU knife edges (DEVELOPING.md: "Parity tests and ReLU knife edges") -------------------------------
#
# A ReLU unit whose input lies within float32 rounding of zero is on under one legal summation order and
# off under another (another BLAS core, another thread split), and that one flipped bit moves the
# gradients of every layer below it far beyond a float64 tolerance. So a parity test of a ReLU network
# first moves every unit off the knife edge: in the float64 twin, each Linear that feeds a ReLU is
# watched during one forward, and the bias of any unit whose input comes within RELU_MARGIN of zero
# (relative to the largest |input| of its row) is shifted until every row clears the margin. The shift is
# a few times 1e-4 of the row's scale, on a few percent of the units; the test then runs on the shifted
# weights in both libraries, with its tolerances unchanged. relu_margins() re-checks the result, and
# also measures how far torch float32's ReLU inputs are from float64's: the margin is only a proof while
# that deviation is well inside it (asserted at RELU_MARGIN / 10).
RELU_MARGIN = 1e-4


def relu_feeders(module):
    """The Linear layers whose outputs go straight into a ReLU, in registration (= forward) order:
    a Linear followed by nn.ReLU in a Sequential (the pre-norm reference), or a PositionwiseFeedForward's
    w_1 (the post-norm reference, F.relu(w_1(x)))."""
    found = []
    for m in module.modules():
        if isinstance(m, torch.nn.Sequential):
            layers = list(m)
            found += [a for a, b in zip(layers, layers[1:])
                      if isinstance(a, torch.nn.Linear) and isinstance(b, torch.nn.ReLU)]
        elif type(m).__name__ == "PositionwiseFeedForward":
            found.append(m.w_1)
    return found


def _watch(linears, fn):
    return [lin.register_forward_hook(lambda mod, inp, out, i=i: fn(i, mod, out)) for i, lin in enumerate(linears)]


def clear_relu_knife_edges(ref, build, forward, margin=RELU_MARGIN):
    """Shift the biases of ref's ReLU-feeding Linears (in place, float32) so that, in float64, no ReLU
    input of forward(model) lies within `margin` of zero relative to its row's largest |input|.
    build() makes a fresh module like ref (for the float64 twin). Returns how many units were shifted."""
    twin = float64_copy(ref, build)
    ours, theirs = relu_feeders(twin), relu_feeders(ref)
    assert ours and len(ours) == len(theirs), "no Linear feeding a ReLU was found: nothing to protect"
    shifted = 0

    def nudge(i, lin, out):
        nonlocal shifted
        rows = out.detach().reshape(-1, out.shape[-1])
        bound = margin * rows.abs().amax(-1, keepdim=True)            # (rows, 1)
        step = 2 * float(bound.max())
        for j in torch.nonzero((rows.abs() < bound).any(0)).flatten().tolist():
            column = rows[:, j:j + 1]
            for k in range(1, 1000):
                delta = step * ((k + 1) // 2) * (1 if k % 2 else -1)     # +s, -s, +2s, -2s, ...
                if bool(((column + delta).abs() >= bound).all()):
                    break
            else:
                raise AssertionError(f"ReLU unit {j} of layer {i}: no bias shift clears the margin")
            with torch.no_grad():
                new = (theirs[i].bias[j] + delta).float()             # the float32 weight both libraries get
                moved = float(new.double() - lin.bias[j])
                theirs[i].bias[j] = new
                lin.bias[j] += moved
            rows[:, j] += moved
            shifted += 1
        return rows.reshape(out.shape)

    hooks = _watch(ours, nudge)
    try:
        with torch.no_grad():
            forward(twin)
    finally:
        for h in hooks:
            h.remove()
    return shifted


def relu_margins(ref, build, forward):
    """(smallest |ReLU input| relative to its row's largest, in float64; largest |float32 - float64| at a
    ReLU input relative to its row's largest, torch float32 against float64), over forward(model)."""
    twin = float64_copy(ref, build)
    seen = {}

    def record(tag):
        def fn(i, lin, out):
            rows = out.detach().reshape(-1, out.shape[-1])
            seen[tag, i] = rows.double()
        return fn

    hooks = _watch(relu_feeders(twin), record(64)) + _watch(relu_feeders(ref), record(32))
    try:
        with torch.no_grad():
            forward(twin)
            forward(ref)
    finally:
        for h in hooks:
            h.remove()
    smallest, deviation = float("inf"), 0.0
    for (tag, i), rows in seen.items():
        if tag != 64:
            continue
        scale = rows.abs().amax(-1, keepdim=True)
        smallest = min(smallest, float((rows.abs() / scale).min()))
        deviation = max(deviation, float(((seen[32, i] - rows).abs() / scale).max()))
    return smallest, deviation


def assert_relu_margins(ref, build, forward, margin=RELU_MARGIN):
    """No ReLU input within `margin` of zero (float64), and torch float32 within margin / 10 of float64
    at every ReLU input: no legal float32 summation order can flip a unit. Returns the two figures."""
    smallest, deviation = relu_margins(ref, build, forward)
    assert smallest >= margin, f"a ReLU input lies {smallest:.3g} of its row's largest from zero (margin {margin})"
    assert deviation <= margin / 10, f"float32 ReLU inputs are {deviation:.3g} from float64: margin {margin} too thin"
    return smallest, deviation
