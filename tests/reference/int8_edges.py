"""int8.hpp's rule in torch, and its knife edges (DEVELOPING.md: "Parity tests and knife edges").

The rule quantises each row of a Linear's input on the fly: q = round(x * 127 / amax(row)). A value whose
x * 127 / amax lies within float32 rounding of a half-integer rounds one way under one legal summation
order and the other way under another (another CPU's kernels, another OpenBLAS core). One flipped q moves
that Linear's output by a whole quantisation step, every later layer sees it, and more values downstream
cross their boundaries: a whole int8 model's logits then move by up to the size of the quantisation
itself (torch's own rule moved by 4e-6 to 6e-3 when the weights were perturbed by 1e-7 relative). So a
whole-model int8 test first moves every quantised input off its rounding boundary, as the ReLU tests move
units off zero: in a float64 twin running the same rule, each quantised Linear's input is watched, and
the column that produced a value within INT8_MARGIN of a half-integer is scaled (the LayerNorm's weight
and bias, or the producing Linear's output row) until every row of every quantised input clears it.
int8_margins() re-checks the result and measures how far torch float32's pre-rounding values are from
float64's: the margin is a proof only while that deviation is well inside it (asserted at margin / 10).

Written for the post-norm Transformer (tests/reference/post_norm.py): its quantised Linears and the
module that produces each one's input are listed in int8_sites().
"""
import types

import torch

from reference.parity import float64_copy

# In units of one quantisation step (q): torch's float32 moves these values by 2-5e-5 step from float64 at
# the test models' sizes (measured at every quantised input before the first flip), so 2e-3 leaves 40x to
# spare; about 0.4% of all values start inside it.
INT8_MARGIN = 2e-3


def quantize_rows(t):
    """int8.hpp's row rule on a float tensor's last dimension: (q before rounding, q, scale), in t's dtype.
    A float32 weight quantised here is bit for bit the core's quantize_weight_int8."""
    amax = t.abs().amax(-1)
    ok = amax > 0
    scale = torch.where(ok, amax / 127, torch.zeros_like(amax))
    inv = torch.where(ok, 127 / torch.where(ok, amax, torch.ones_like(amax)), torch.zeros_like(amax))
    exact = t * inv[..., None]
    return exact, torch.round(exact), scale             # torch.round: ties to even, as nearbyint


def int8_rule_forward(self, x):
    """int8.hpp's rule for one torch nn.Linear, in x's dtype (float32: the core's epilogue operation by
    operation; float64: the same rule with exact activations). The weight is always quantised from its
    float32 value, as the core quantises it; the int sums are exact in float64 (|sums| < 2**53)."""
    shape = x.shape
    rows = x.reshape(-1, shape[-1])
    exact, qx, sx = quantize_rows(rows)
    if self.int8_watch is not None:
        self.int8_watch(self, exact)
    _, qw, sw = quantize_rows(self.weight.float())
    acc = (qx.double() @ qw.double().T).to(x.dtype)
    y = acc * (sx[:, None] * sw.to(x.dtype)[None, :])
    if self.bias is not None:
        y = y + self.bias
    return y.reshape(*shape[:-1], -1)


def use_int8_rule(model, watch=None):
    """Make every nn.Linear of model compute int8_rule_forward; watch(linear, pre-rounding values) is
    called on each quantised input."""
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            m.forward = types.MethodType(int8_rule_forward, m)
            m.int8_watch = watch
    return model


def int8_sites(model):
    """The post-norm Transformer: [(quantised Linear, the module whose output columns are its input columns)],
    in forward order. The attention's output projection (fc) reads the heads' weighted values, column j of
    which is the value projection's output j averaged by the softmax; the FFN's w_2 reads ReLU(w_1(x))."""
    sites = []
    below = model.encoder.layer_norm
    for layer in model.encoder.layer_stack:
        attn, ffn = layer.slf_attn, layer.pos_ffn
        sites += [(attn.w_qs, below), (attn.w_ks, below), (attn.w_vs, below), (attn.fc, attn.w_vs),
                  (ffn.w_1, attn.layer_norm), (ffn.w_2, ffn.w_1)]
        below = ffn.layer_norm
    encoder_output = below
    below = model.decoder.layer_norm
    for layer in model.decoder.layer_stack:
        own, cross, ffn = layer.slf_attn, layer.enc_attn, layer.pos_ffn
        sites += [(own.w_qs, below), (own.w_ks, below), (own.w_vs, below), (own.fc, own.w_vs),
                  (cross.w_qs, own.layer_norm), (cross.w_ks, encoder_output), (cross.w_vs, encoder_output),
                  (cross.fc, cross.w_vs), (ffn.w_1, cross.layer_norm), (ffn.w_2, ffn.w_1)]
        below = ffn.layer_norm
    sites.append((model.trg_word_prj, below))
    return sites


def _scale_column(module, j, factor):
    """Scale output column j of a LayerNorm (weight and bias) or a Linear (row j of the weight, bias j) by
    factor, rounded to float32 (what both libraries get). A ReLU after a Linear keeps its sign pattern."""
    with torch.no_grad():
        for p in [module.weight, module.bias]:
            if p is not None:
                p[j] = (p[j] * factor).float()


# Candidate column scalings, smallest change first: 1 +- 0.1%, 1 +- 0.2%, ... up to 25%.
_FACTORS = [1 + sign * k * 1e-3 for k in range(1, 251) for sign in (1, -1)]


def _boundary_distance(exact):
    """Distance of each pre-rounding value from the nearest half-integer (its rounding boundary)."""
    return ((exact - torch.floor(exact)) - 0.5).abs()


def _requantised(exact, factors):
    """The pre-rounding values after scaling the input's columns by factors: a row's largest value stays
    at 127, so scaling the column that holds it moves the row's other values too."""
    scaled = exact * factors
    amax = scaled.abs().amax(-1, keepdim=True)
    return torch.where(amax > 0, scaled * 127 / torch.where(amax > 0, amax, torch.ones_like(amax)), scaled)


def _column_factors(exact, margin):
    """{column: factor} that clears one quantised input's values off their boundaries: column by column,
    the smallest change that leaves fewer values within the margin in the whole input."""
    factors = torch.ones(exact.shape[-1], dtype=exact.dtype)
    inside = lambda values: _boundary_distance(values) < margin  # noqa: E731
    now = int(inside(exact).sum())
    for _ in range(10):
        for j in torch.nonzero(inside(_requantised(exact, factors)).any(0)).flatten().tolist():
            for f in _FACTORS:
                trial = factors.clone()
                trial[j] *= f
                count = int(inside(_requantised(exact, trial)).sum())
                if count < now:
                    factors, now = trial, count
                    break
        if now == 0:
            break
    return {j: float(f) for j, f in enumerate(factors.tolist()) if f != 1.0}


def _watch_all(model):
    seen = []

    def watch(linear, exact):
        seen.append((linear, exact.detach().double().clone()))
    use_int8_rule(model, watch)
    return seen


def clear_int8_knife_edges(ref, build, forward, margin=INT8_MARGIN, max_passes=2000):
    """Scale columns of ref's weights (in place, float32) so that, in a float64 twin running the int8 rule,
    no quantised input of forward(model) lies within `margin` (in quantisation steps) of a rounding
    boundary. build() makes a fresh module like ref. Returns how many columns were scaled."""
    twin = float64_copy(ref, build)
    twin_sites, ref_sites = int8_sites(twin), int8_sites(ref)
    producer = {id(lin): (twin_mod, ref_mod) for (lin, twin_mod), (_, ref_mod) in zip(twin_sites, ref_sites)}
    order = {id(lin): i for i, (lin, _) in enumerate(twin_sites)}
    seen = _watch_all(twin)
    scaled = 0
    for _ in range(max_passes):
        seen.clear()
        with torch.no_grad():
            forward(twin)
        bad = [(order[id(lin)], lin, exact) for lin, exact in seen if bool((_boundary_distance(exact) < margin).any())]
        if not bad:
            return scaled
        _, lin, exact = min(bad, key=lambda b: b[0])           # the first site in forward order: later ones follow it
        twin_mod, ref_mod = producer[id(lin)]
        factors = _column_factors(exact, margin)
        if not factors:
            break                                               # no scaling helps this input: another pass would not either
        for j, factor in factors.items():
            _scale_column(ref_mod, j, factor)
            with torch.no_grad():
                twin_mod.weight[j] = ref_mod.weight[j].double()
                if twin_mod.bias is not None:
                    twin_mod.bias[j] = ref_mod.bias[j].double()
            scaled += 1
    raise AssertionError(f"no column scaling cleared the int8 margin {margin} (within {max_passes} passes)")


def int8_margins(ref, build, forward):
    """(smallest distance of a float64 pre-rounding value from its rounding boundary, largest |float32 -
    float64| of a pre-rounding value), in quantisation steps, over every quantised input of forward(model):
    ref's copy running the rule in float32 against a float64 twin."""
    twin = float64_copy(ref, build)
    single = build().eval()
    single.load_state_dict(ref.state_dict())
    wide, narrow = _watch_all(twin), _watch_all(single)
    with torch.no_grad():
        forward(twin)
        forward(single)
    linears = {id(m) for m in twin.modules() if isinstance(m, torch.nn.Linear)}
    assert {id(lin) for lin, _ in int8_sites(twin)} == {id(lin) for lin, _ in wide} == linears, \
        "int8_sites must list every Linear, and each must have run"
    smallest = min(float(_boundary_distance(e).min()) for _, e in wide)
    deviation = max(float((a - b).abs().max()) for (_, a), (_, b) in zip(wide, narrow))
    return smallest, deviation


def assert_int8_margins(ref, build, forward, margin=INT8_MARGIN):
    """No quantised input within `margin` of a rounding boundary (float64), and torch float32 within
    margin / 10 of float64 at every one: no legal float32 summation order can flip a q. Returns both."""
    smallest, deviation = int8_margins(ref, build, forward)
    assert smallest >= margin, f"a quantised input lies {smallest:.3g} steps from its rounding boundary (margin {margin})"
    assert deviation <= margin / 10, f"float32 pre-rounding values are {deviation:.3g} steps from float64: margin too thin"
    return smallest, deviation
