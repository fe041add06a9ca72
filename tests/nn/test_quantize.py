"""int8 inference of whole models (Module.quantize, ctransformer.quantize_dynamic, decode's compute_type).

Against PyTorch: the post-norm reference (tests/reference/post_norm.py) with every nn.Linear replaced by
int8.hpp's rule written in torch (tests/reference/int8_edges.py: exact int sums, the float32 epilogue in
the same order) is the reference. Two comparisons, neither decided by a rounding boundary:
- every quantised Linear of our model, given the very input torch's rule saw, returns torch's output to the
  bit (the rule is exact, whatever kernel ran);
- the whole model, after every quantised input is moved off its rounding boundary (clear_int8_knife_edges,
  proven by assert_int8_margins), agrees with torch's rule to float32 rounding. Without that step the
  whole int8 model is chaotic: one float32 ulp that moves an activation across a boundary flips a q, the
  flips cascade, and the logits move by up to the quantisation's own size (a bound of 2e-4 held on Zen 4/5
  by luck and failed on a Zen 1 at 5.6e-3).
The quantisation itself moves the logits ~1e-2 from float32 (asserted to be at least 100x our difference),
so a path that skipped quantising the activations or the weights, or scaled them wrongly, fails.
"""
import numpy as np
import pytest
import torch

import ctransformer as ct
from reference import post_norm as post_ref
from reference.int8_edges import assert_int8_margins, clear_int8_knife_edges, int8_sites, use_int8_rule
from reference.parity import single_threaded_torch  # noqa: F401 (autouse)

CFG = dict(d_word_vec=64, d_model=64, d_inner=256, n_layers=2, n_head=4, d_k=16, d_v=16)
# Ours against torch's rule once no q can flip: float32 rounding of the softmax, LayerNorm and the
# attention's products only (measured ~4e-7, the float32 model's own parity); a flipped q costs more than
# 1e-5 wherever it lands in these models, a wrong scale or a skipped quantisation ~1e-2.
WHOLE_MODEL_REL = 5e-6


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b.detach().double() if torch.is_tensor(b) else b, np.float64)
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def build(**extra):
    return lambda: post_ref.Transformer(53, 53, 1, 1, **CFG, **extra)


def pair(seed=0, **extra):
    torch.manual_seed(seed)
    ref = build(**extra)().eval()
    model = ct.nn.Transformer(53, 53, 1, 1, **CFG, **extra).eval()
    model.load_state_dict({k: v.detach().numpy() for k, v in ref.state_dict().items()})
    return ref, model


def batch():
    rng = np.random.default_rng(0)
    src, trg = rng.integers(2, 53, (4, 13)), rng.integers(2, 53, (4, 10))
    src[0, 9:] = 1
    trg[1, 6:] = 1
    return src, trg


# jadore801120's defaults (shared embeddings and output projection, scaled), and all three apart.
EXTRAS = [{}, dict(trg_emb_prj_weight_sharing=False, emb_src_trg_weight_sharing=False)]


def ct_linear(model, torch_name):
    """Our module of that state-dict name (the names are torch's)."""
    module = model
    for part in torch_name.split("."):
        module = getattr(module, part) if not part.isdigit() else module[int(part)]
    return module


@pytest.mark.parametrize("extra", EXTRAS)
def test_every_quantised_linear_of_the_model_is_the_int8_rule_to_the_bit(extra):
    ref, model = pair(**extra)
    src, trg = batch()
    inputs = {}
    use_int8_rule(ref, watch=None)

    def record(module, args, out):
        inputs[id(module)] = (args[0].detach().clone(), out.detach().clone())
    for lin, _ in int8_sites(ref):
        lin.register_forward_hook(record)
    with torch.no_grad():
        ref(torch.from_numpy(src), torch.from_numpy(trg))
    model.quantize("int8")
    names = {id(m): name for name, m in ref.named_modules()}
    assert len(inputs) == len(int8_sites(ref))
    with ct.no_grad():
        for key, (x, want) in inputs.items():
            ours = ct_linear(model, names[key])(ct.tensor(x.numpy())).numpy()
            np.testing.assert_array_equal(ours, want.numpy(), err_msg=names[key])


@pytest.mark.parametrize("extra", EXTRAS)
def test_quantised_transformer_matches_torch_with_the_same_int8_rule(extra):
    ref, model = pair(**extra)
    src, trg = batch()

    def forward(m):
        return m(torch.from_numpy(src), torch.from_numpy(trg))

    scaled = clear_int8_knife_edges(ref, build(**extra), forward)
    smallest, deviation = assert_int8_margins(ref, build(**extra), forward)
    model.load_state_dict({k: v.detach().numpy() for k, v in ref.state_dict().items()})
    with torch.no_grad():
        fp32 = forward(ref)
        sim = forward(use_int8_rule(ref))
    model.quantize("int8")
    with ct.no_grad():
        ours = model(src, trg).numpy()
    quantisation = rel(fp32, sim)
    print(f"{scaled} columns scaled; margin {smallest:.3g} steps, float32 off float64 by {deviation:.3g}; "
          f"int8 against float32 {quantisation:.2e}, ours against torch's int8 {rel(ours, sim):.2e}")
    assert 1e-3 < quantisation < 5e-2          # int8 moves the logits this much from float32
    assert rel(ours, sim) < WHOLE_MODEL_REL
    assert rel(ours, sim) < quantisation / 100


def test_quantize_and_dequantize_keep_the_float_parameters():
    ref, model = pair()
    src, trg = batch()
    state = {k: np.array(v) for k, v in model.state_dict().items()}
    with ct.no_grad():
        before = model(src, trg).numpy()
        assert model.quantization is None
        assert model.quantize("int8") is model and model.quantization == "int8"
        lin = model.encoder.layer_stack[0].pos_ffn.w_1
        assert lin.int8_weight is not None and lin.int8_weight.q.dtype == np.int8
        np.testing.assert_array_equal(lin.int8_weight.q, ct.quantization.quantize_weight(lin.weight.numpy()).q)
        quantised = model(src, trg).numpy()
        assert not np.array_equal(quantised, before)
        for k, v in model.state_dict().items():
            np.testing.assert_array_equal(v, state[k])
        assert model.dequantize() is model and model.quantization is None and lin.int8_weight is None
        np.testing.assert_array_equal(model(src, trg).numpy(), before)


def test_load_state_dict_requantises():
    _, model = pair(0)
    _, other = pair(1)
    model.quantize("int8")
    model.load_state_dict(other.state_dict())
    other.quantize("int8")
    src, trg = batch()
    with ct.no_grad():
        np.testing.assert_array_equal(model(src, trg).numpy(), other(src, trg).numpy())


def test_a_quantised_model_runs_anywhere_and_refuses_backward():
    """As torch's dynamically quantised modules: forward with grad mode on gives the no_grad numbers, and no
    gradient flows through an int8 Linear. A backward that reaches one raises, even beside a float32 path
    (x + lin(x) must not quietly backward through the residual alone)."""
    _, model = pair()
    model.quantize("int8").eval()
    src, trg = batch()
    logits = model(src, trg)
    with ct.no_grad():
        np.testing.assert_array_equal(logits.numpy(), model(src, trg).numpy())
    with pytest.raises(ValueError, match="quantised to int8 and has no gradient.*dequantize"):
        logits.sum().backward()
    lin = ct.nn.Linear(4, 4).quantize("int8")
    x = ct.tensor(np.ones((2, 4), np.float32), requires_grad=True)
    y = lin(x)
    with ct.no_grad():
        np.testing.assert_array_equal(y.numpy(), lin(x).numpy())
    with pytest.raises(ValueError, match="has no gradient"):
        ct.functional.add(x, y).sum().backward()
    assert lin.weight.grad is None          # the error is the whole answer: no gradient reached the weight
    with pytest.raises(ValueError, match="has no gradient"):       # the parameter alone needs a gradient
        lin(ct.tensor(np.ones((2, 4), np.float32))).sum().backward()
    model.dequantize()
    model(src, trg).sum().backward()                                 # float32 again: it trains
    assert model.trg_word_prj.weight.grad is not None
    with pytest.raises(ValueError, match="dtype must be 'int8'"):
        model.quantize("int4")


def test_quantize_dynamic_copies_by_default():
    _, model = pair()
    q = ct.quantize_dynamic(model)
    assert q is not model and q.quantization == "int8" and model.quantization is None
    assert ct.quantize_dynamic(model, dtype="int8", inplace=True) is model and model.quantization == "int8"
    with pytest.raises(ValueError, match="dtype"):
        ct.quantize_dynamic(model, dtype="float16")
    # A GPT is copied too (from the sizes it keeps), and a copy draws nothing from the library generator.
    gpt = ct.nn.GPT(vocab_size=20, max_seq_len=8, n_layers=1, d_model=16, n_head=2, d_inner=32,
                    dropout=0.0).eval()
    state = ct.get_rng_state()
    q = ct.quantize_dynamic(gpt)
    assert ct.get_rng_state() == state
    assert q is not gpt and q.quantization == "int8" and gpt.quantization is None and not q.training
    idx = np.array([[1, 2, 3, 4]])
    np.testing.assert_array_equal(q(idx)[0].numpy(), ct.quantize_dynamic(gpt, inplace=True)(idx)[0].numpy())

    class Mine(ct.nn.Module):   # a model of one's own has no config to copy it from
        def __init__(self):
            super().__init__()
            self.fc = ct.nn.Linear(4, 4)

    with pytest.raises(TypeError, match="inplace=True"):
        ct.quantize_dynamic(Mine())


def test_decode_compute_type():
    _, model = pair()
    src, _ = batch()
    mask = ct.nn.get_pad_mask(src, 1)

    def greedy(**kw):
        return ct.decode.greedy_decode(model, src, mask, 12, 2, return_logits=True, **kw)
    f32, f32_logits = greedy()
    i8, i8_logits = greedy(compute_type="int8")
    i8_beam = ct.decode.beam_search(model, src, mask, 12, 2, 3, beam_size=3, n_best=3, compute_type="int8")
    assert model.quantization is None           # quantised for the call only
    assert not np.array_equal(i8_logits, f32_logits)
    # The same computations by two routes, equal to the bit: the int8 weights are the rule applied to the same
    # float32 parameters, which a quantised model keeps and compute_type="float32" uses.
    model.quantize("int8")
    for got, want in zip(greedy(), (i8, i8_logits)):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(greedy(compute_type="float32"), (f32, f32_logits)):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(ct.decode.beam_search(model, src, mask, 12, 2, 3, beam_size=3, n_best=3), i8_beam):
        np.testing.assert_array_equal(got, want)
    assert model.quantization == "int8"
    # int8 with and without the caches: the rule is per row, but the attention over the caches runs in float32
    # and differs from the full-prefix loop's by rounding (<= 6e-8 in these logits), which can flip an int8
    # rounding (DEVELOPING.md, "Parity tests and knife edges"). One flip moves these logits by as much as the
    # whole quantisation does (5.9e-3): seen 3.6e-3 or 5.4e-3 when torch's rule quantised its inputs x (1 + 1e-7
    # N(0, 1)) (18 draws of 20 flipped something), up to 6.0e-3 with the weights x (1 + 1e-6 N(0, 1)). So the
    # two routes are fed the same prefixes (the int8 greedy path), their logits are bounded by 1e-2 (that with
    # room), and an arg-max is compared only where its top-1/top-2 gap is 6e-2, 10x the largest flip seen (and
    # 3x what two routes 1e-2 apart can move a gap). Not compared: the two routes' own greedy or beam ids. Every
    # first step's gap is 1.6e-2 to 2.8e-2, and each source's beam search takes a decision (a pruning boundary,
    # the final order) within 2.7e-4 to 2.2e-3: all inside one flip, so their paths may legally part.
    steps = {}
    for use_cache in (True, False):
        decoder = ct.decode.StepDecoder(model, src, mask, use_cache=use_cache)
        steps[use_cache] = np.stack([decoder.step(i8[:, t]).numpy() for t in range(11)], axis=1)
    assert np.abs(steps[True] - steps[False]).max() <= 1e-2
    top = np.sort(steps[True], axis=-1)
    clear = top[..., -1] - top[..., -2] >= 6e-2
    assert clear.sum() >= 0.5 * clear.size, f"only {clear.sum()} of {clear.size} steps clear 6e-2"   # seen 28 of 44
    np.testing.assert_array_equal(steps[True].argmax(-1)[clear], steps[False].argmax(-1)[clear])
    with pytest.raises(ValueError, match="compute_type must be one of"):
        ct.decode.greedy_decode(model, src, mask, 12, 2, compute_type="int4")


def test_decode_keeps_an_enclosing_autocast_region():
    # compute_type="default" must leave an enclosing ct.autocast in force (it once opened a float32 region of
    # its own inside it, so bf16 decoding silently ran in float32).
    _, model = pair()
    src, _ = batch()
    mask = ct.nn.get_pad_mask(src, 1)

    def logits(**kw):
        return ct.decode.greedy_decode(model, src, mask, 8, 2, return_logits=True, **kw)[1]
    f32 = logits()
    with ct.autocast(dtype="bfloat16"):
        region = logits()
        np.testing.assert_array_equal(logits(compute_type="float32"), f32)
    np.testing.assert_array_equal(region, logits(compute_type="bfloat16"))
    assert not np.array_equal(region, f32)
