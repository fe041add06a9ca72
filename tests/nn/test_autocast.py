"""ct.autocast (bf16 mixed precision) against torch.autocast("cpu", dtype=torch.bfloat16) on the same weights.

What differs by design: torch rounds every autocast product's output to bf16 (and runs some ops after it in
bf16); ours keeps the fp32 sum. Both round the same operands to bf16 (round to nearest even, the same bits:
tests/ops/test_ops_bf16.py), so the two differ by torch's output roundings, at most 2**-8 relative each
(bf16 keeps 8 significant bits),
plus float32 summation order.

Tolerances, and why:
- One op (linear, matmul): elementwise |ct - torch| <= 1.01 2**-8 |torch| + 2 k 2**-24 S, S = |op(A)| @ |op(B)|
  of the rounded operands: torch's output rounding (2**-8 of the exact value, so 1.004 2**-8 of torch's) plus
  both sides' float32 summation bound. Our own result is held to the float32 bound alone, k 2**-24 S,
  against float64 on the rounded operands; and it must miss the unrounded product by more than that, or
  the op did not run in bf16.
- Whole models (GPT with GELU, the post-norm Transformer with ReLU): many roundings chain through layers,
  so errors are measured as ||a - b|| / ||b|| over a tensor. Logits within 1e-2 of torch's (seen
  2.3-2.8e-3; one bf16 rounding is 3.9e-3 relative). Gradients of the GPT within 3e-2 per tensor (seen
  <= 1.4e-2), with a floor of 1e-4 of the largest tensor's norm for the k_layer biases, whose gradient is
  0 in exact arithmetic. Against float64, ours must be at least as accurate as torch's autocast, within
  a factor 1.5 (seen: ours closer in nearly every tensor, since we do not round outputs).
- ReLU units near zero can flip between any two bf16 runs: the Transformer's gradients are compared as one
  vector (every parameter), where a flipped unit moves the norm by a small fraction, never per tensor;
  within 6e-2 of torch's (seen 3.4e-2: bf16 moves this post-norm model's gradients by 3% from float64
  in torch's autocast, 2.6% in ours), and at least as close to float64 as torch's within a factor 1.5.
"""
import math

import numpy as np
import pytest
import torch

import ctransformer as ct
from ctransformer import amp
from reference import post_norm as post_ref
from reference.gpt_pairs import SMALL, make_pair
from reference.parity import single_threaded_torch  # noqa: F401 (autouse)

F = ct.functional
EPS32 = 2.0**-24


def rel(a, b):
    a = np.asarray(a.detach().float() if isinstance(a, torch.Tensor) else a, np.float64)
    b = np.asarray(b.detach().float() if isinstance(b, torch.Tensor) else b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def rounded64(x):
    return amp.widen_bf16(amp.round_to_bf16(np.asarray(x, np.float32))).astype(np.float64)


def check_product(ours, theirs, a, b, what, bias=None, torch_roundings=1):
    """ours and torch's op(A) @ op(B) (+ bias) (numpy, A and B already transposed as the op sees them):
    the bounds above. A bias starts our fp32 sum as it is; torch rounds it to bf16 first (2**-8 |b| more)."""
    A, B = rounded64(a), rounded64(b)
    start = np.zeros(A.shape[0:1] + B.shape[1:]) if bias is None else np.broadcast_to(np.asarray(bias, np.float64), A.shape[0:1] + B.shape[1:])
    exact, size = start + A @ B, np.abs(start) + np.abs(A) @ np.abs(B)
    k = A.shape[-1] + 1
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    assert (np.abs(ours - exact) <= k * EPS32 * size).all(), f"{what}: beyond the float32 bound of the rounded product"
    # torch_roundings > 1: torch rounds partial results too (a broadcast operand's gradient is a bf16 sum
    # of bf16 products), each within 2**-8 of the magnitudes summed, S
    slack = 1.01 * 2.0**-8 * np.abs(theirs) if torch_roundings == 1 else torch_roundings * 2.0**-8 * size
    assert (np.abs(ours - theirs) <= slack + 2.0**-8 * np.abs(start) + 2 * k * EPS32 * size).all(), \
        f"{what}: far from torch"
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert not (np.abs(ours - start - a64 @ b64) <= k * EPS32 * (np.abs(start) + np.abs(a64) @ np.abs(b64))).all(), \
        f"{what}: equals the float32 product, so it did not run in bf16"


# --- ops ----------------------------------------------------------------------------------------------
def test_linear_forward_and_gradients_match_torch_autocast():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 7, 64)).astype(np.float32)
    w = (rng.standard_normal((48, 64)) * 0.2).astype(np.float32)
    b = rng.standard_normal(48).astype(np.float32)
    g = rng.standard_normal((5, 7, 48)).astype(np.float32)
    xc, wc, bc = (ct.tensor(v, requires_grad=True) for v in (x, w, b))
    xt, wt, bt = (torch.tensor(v, requires_grad=True) for v in (x, w, b))
    with ct.autocast(dtype="bfloat16"):
        y = F.linear(xc, wc, bc)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        yt = torch.nn.functional.linear(xt, wt, bt)
    (y * ct.tensor(g)).sum().backward()   # outside the region: the op remembers it ran in bf16
    (yt.float() * torch.from_numpy(g)).sum().backward()
    X, G = x.reshape(-1, 64), g.reshape(-1, 48)
    check_product(y.numpy().reshape(-1, 48), yt.float().detach().numpy().reshape(-1, 48), X, w.T, "y", bias=b)
    check_product(xc.grad.numpy().reshape(-1, 64), xt.grad.numpy().reshape(-1, 64), G, w, "dx")
    check_product(wc.grad.numpy(), wt.grad.numpy(), G.T, X, "dW")
    # db sums the fp32 gradient (torch sums its bf16-rounded copy): within torch's roundings
    assert np.allclose(bc.grad.numpy(), bt.grad.numpy(), rtol=2.0**-7, atol=2.0**-8 * np.abs(G).sum(0).max())


def test_matmul_batched_and_transposed_match_torch_autocast():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 3, 9, 33)).astype(np.float32)
    b = rng.standard_normal((3, 33, 17)).astype(np.float32)  # broadcast over the first dimension
    g = rng.standard_normal((2, 3, 9, 17)).astype(np.float32)
    ac, bc = ct.tensor(a, requires_grad=True), ct.tensor(b, requires_grad=True)
    at, bt = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    with ct.autocast():
        c = F.matmul(ac, bc)
        (c * ct.tensor(g)).sum().backward()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ctorch = torch.matmul(at, bt)
    (ctorch.float() * torch.from_numpy(g)).sum().backward()
    for i in range(2):
        for h in range(3):
            check_product(c.numpy()[i, h], ctorch.float().detach().numpy()[i, h], a[i, h], b[h], f"c[{i},{h}]")
            check_product(ac.grad.numpy()[i, h], at.grad.numpy()[i, h], g[i, h], b[h].T, f"da[{i},{h}]")
    # dB sums over the broadcast dimension: two products chained in one fp32 buffer
    for h in range(3):
        stacked_a = np.concatenate([a[0, h], a[1, h]], axis=0)
        stacked_g = np.concatenate([g[0, h], g[1, h]], axis=0)
        check_product(bc.grad.numpy()[h], bt.grad.numpy()[h], stacked_a.T, stacked_g, f"db[{h}]",
                      torch_roundings=3)


def test_attention_matches_torch_autocast():
    """The fused attention op: scores and the weighted sum in bf16, softmax in fp32."""
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((2, 4, 11, 16)).astype(np.float32) for _ in range(3))
    mask = np.ones((2, 1, 1, 11), bool)
    mask[1, ..., 8:] = False
    g = rng.standard_normal((2, 4, 11, 16)).astype(np.float32)
    qc, kc, vc = (ct.tensor(x, requires_grad=True) for x in (q, k, v))
    qt, kt, vt = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    with ct.autocast():
        out, attn = F.scaled_dot_product_attention(qc, kc, vc, mask)
    (out * ct.tensor(g)).sum().backward()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        scores = torch.matmul(qt / 4.0, kt.transpose(-2, -1)).float().masked_fill(~torch.from_numpy(mask), -1e9)
        tattn = torch.softmax(scores, -1)
        tout = torch.matmul(tattn, vt).float()
    (tout * torch.from_numpy(g)).sum().backward()
    with ct.no_grad():
        out32, _ = F.scaled_dot_product_attention(ct.tensor(q), ct.tensor(k), ct.tensor(v), mask)
    assert rel(out.numpy(), tout) < 1e-2
    assert rel(attn.numpy(), tattn) < 1e-2
    assert rel(out.numpy(), out32.numpy()) > 2.0**-12, "the same as float32: the products did not run in bf16"
    for name, ours, theirs in (("dq", qc, qt), ("dk", kc, kt), ("dv", vc, vt)):
        assert rel(ours.grad.numpy(), theirs.grad) < 2e-2, name


# --- whole models -------------------------------------------------------------------------------------
@pytest.mark.parametrize("sharp", [False, True], ids=["default-init", "sharp"])
def test_gpt_forward_and_gradients_match_torch_autocast(sharp):
    tm, cm = make_pair(SMALL, sharp=sharp)
    t64 = make_pair(SMALL, sharp=sharp)[0].double()
    _, c32 = make_pair(SMALL, sharp=sharp)
    rng = np.random.default_rng(1)
    idx, targets = rng.integers(0, 50, (3, 12)), rng.integers(1, 50, (3, 12))
    logits64, loss64 = t64(torch.from_numpy(idx), torch.from_numpy(targets))
    loss64.backward()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        tlogits, tloss = tm(torch.from_numpy(idx), torch.from_numpy(targets))
    tloss.backward()
    with ct.autocast(dtype="bfloat16"):
        logits, loss = cm(idx, targets)
        loss.backward()
    logits32, _ = c32(idx, targets)
    assert rel(logits.numpy(), tlogits) < 1e-2
    assert rel(logits.numpy(), logits64) <= 1.5 * rel(tlogits, logits64)
    assert rel(logits.numpy(), logits32.numpy()) > 2.0**-12, "the same as float32: autocast did nothing"
    assert loss.item() == pytest.approx(tloss.item(), rel=1e-2)
    theirs, exact = dict(tm.named_parameters()), dict(t64.named_parameters())
    floor = 1e-4 * max(float(p.grad.norm()) for p in exact.values())
    for name, p in cm.named_parameters():
        ours, tg, eg = p.grad.numpy().astype(np.float64), theirs[name].grad.double().numpy(), exact[name].grad.numpy()
        assert np.linalg.norm(ours - tg) <= 3e-2 * np.linalg.norm(tg) + floor, name
        assert np.linalg.norm(ours - eg) <= 1.5 * np.linalg.norm(tg - eg) + floor, name


def test_post_norm_transformer_matches_torch_autocast():
    cfg = dict(d_word_vec=32, d_model=32, d_inner=64, n_layers=2, n_head=4, d_k=8, d_v=8)
    torch.manual_seed(0)
    ref = post_ref.Transformer(41, 41, 1, 1, **cfg).eval()
    ref64 = post_ref.Transformer(41, 41, 1, 1, **cfg).double().eval()
    ref64.load_state_dict(ref.state_dict())
    model = ct.nn.Transformer(41, 41, 1, 1, **cfg).eval()
    model.load_state_dict({k: v.detach().numpy() for k, v in ref.state_dict().items()})
    rng = np.random.default_rng(0)
    src, trg = rng.integers(2, 41, (3, 11)), rng.integers(2, 41, (3, 9))
    src[0, 7:] = 1
    trg[1, 5:] = 1
    gold = np.concatenate([trg[:, 1:], np.full((3, 1), 1)], axis=1).reshape(-1)
    logits64 = ref64(torch.from_numpy(src), torch.from_numpy(trg))
    torch.nn.functional.cross_entropy(logits64, torch.from_numpy(gold), ignore_index=1).backward()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        tlogits = ref(torch.from_numpy(src), torch.from_numpy(trg))
    tloss = torch.nn.functional.cross_entropy(tlogits.float(), torch.from_numpy(gold), ignore_index=1)
    tloss.backward()
    with ct.autocast(dtype="bfloat16"):
        logits = model(src, trg)
        loss = F.cross_entropy(logits, gold, ignore_index=1)
        loss.backward()
    assert rel(logits.numpy(), tlogits) < 1e-2
    assert rel(logits.numpy(), logits64) <= 1.5 * rel(tlogits, logits64)
    assert loss.item() == pytest.approx(tloss.item(), rel=1e-2)
    names = [n for n, _ in model.named_parameters()]
    ours = np.concatenate([p.grad.numpy().ravel() for _, p in model.named_parameters()]).astype(np.float64)
    tdict, edict = dict(ref.named_parameters()), dict(ref64.named_parameters())
    theirs = np.concatenate([tdict[n].grad.double().numpy().ravel() for n in names])
    exact = np.concatenate([edict[n].grad.numpy().ravel() for n in names])
    # bf16 moves this post-norm model's gradients by ~3% (torch's autocast: 3.2% from float64; ours 2.6%, and
    # 3.4% from torch's), some tensors 5-8%: a loose agreement with torch, a tight one with accuracy
    assert rel(ours, theirs) < 6e-2
    assert rel(ours, exact) <= 1.5 * rel(theirs, exact)


# --- the API ------------------------------------------------------------------------------------------
def test_regions_nest_and_restore():
    assert not ct.is_autocast_enabled()
    with ct.autocast():
        assert ct.is_autocast_enabled()
        with ct.autocast(enabled=False):
            assert not ct.is_autocast_enabled()
        assert ct.is_autocast_enabled()
        with pytest.raises(KeyError):
            with ct.autocast("cpu", dtype="bfloat16"):
                raise KeyError("inside")
        assert ct.is_autocast_enabled()
    assert not ct.is_autocast_enabled()

    @ct.autocast(dtype="bf16")
    def inside():
        return ct.is_autocast_enabled()

    assert inside() and not ct.is_autocast_enabled()


def test_parameters_are_rounded_once_and_kept_current_by_adam():
    """A training product packs the fp32 weight (no copy); Adam in a region writes the weight's bf16 copy
    as it updates it, and the next product reads that copy: the same numbers as rounding the new weight."""
    model = ct.nn.Linear(8, 4)
    x = ct.tensor(np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32))
    opt = ct.optim.Adam(model.parameters(), lr=0.1)
    assert amp._amp.autocast_cache_size() == 0
    with ct.autocast():
        y1 = model(x)
        assert amp._amp.autocast_cache_size() == 0          # recorded for backward: the kernel rounds as it goes
        y1.sum().backward()
        opt.step()                                           # writes the copy as it updates the weight
        assert amp._amp.autocast_cache_size() == 1          # the weight only: no product reads the bias
        y2 = model(x)
        with ct.no_grad():
            y2_inference = model(x)                          # reads the same copy
    assert amp._amp.autocast_cache_size() == 0              # freed at the end of the region
    with ct.autocast():
        fresh = model(x)                                     # the updated weight rounded by the kernel
    assert not np.array_equal(y1.numpy(), y2.numpy())
    np.testing.assert_array_equal(y2.numpy(), fresh.numpy())
    np.testing.assert_array_equal(y2_inference.numpy(), fresh.numpy())


def test_an_inference_product_rounds_the_weight_once_for_the_region():
    """Decoding reads every weight once per token: a product that records no gradient rounds the weight
    into its copy on first use, and later products read it, with the same numbers as the fp32 weight
    rounded by the kernel."""
    model = ct.nn.Linear(8, 4)
    x = ct.tensor(np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32))
    with ct.autocast():
        trained = model(x)                                   # no copy: the kernel rounds the fp32 weight
        assert amp._amp.autocast_cache_size() == 0
        with ct.no_grad():
            first = model(x)
            assert amp._amp.autocast_cache_size() == 1      # the weight (the bias is added in fp32)
            second = model(x)
    assert amp._amp.autocast_cache_size() == 0
    np.testing.assert_array_equal(first.numpy(), trained.numpy())
    np.testing.assert_array_equal(second.numpy(), trained.numpy())


def test_bad_arguments():
    with pytest.raises(ValueError, match="dtype must be 'bfloat16'"):
        ct.autocast(dtype="float16")
    with pytest.raises(ValueError, match="device_type must be 'cpu'"):
        ct.autocast("cuda")
    region = ct.autocast()
    with region:
        with pytest.raises(RuntimeError, match="already in use"):
            region.__enter__()
    assert ct.autocast(dtype=torch.bfloat16).fast_dtype == "bfloat16"


@pytest.mark.skipif(amp.bf16_kernel() not in ("amx_bf16", "avx512_bf16", "neon_bf16"),
                    reason="no native bf16 kernel on this CPU (or under CTRANSFORMER_KERNEL_LEVEL): 'auto' is the "
                           "emulation itself, so there is nothing to compare it with")
def test_emulated_kernel_gives_the_same_model_within_summation_order():
    """Emulated, the same rounded operands go through sgemm: the model's output then differs from the native
    kernel's (AVX512_BF16, or ARM's BF16 on aarch64) only by float32 summation order, and on ARM by its
    round-to-odd additions (tests/ops/test_ops_bf16.py), within the same bound (make test-aarch64 runs it under
    qemu's SVE CPU)."""
    tm, cm = make_pair(SMALL)
    idx = np.random.default_rng(0).integers(0, 50, (2, 10))
    with ct.autocast(), ct.no_grad():
        native, _ = cm(idx)
        amp.set_bf16_kernel("emulated")
        try:
            emulated, _ = cm(idx)
        finally:
            amp.set_bf16_kernel("auto")
    # A float32 difference of one ulp sometimes moves an activation across a bf16 rounding boundary, which
    # then moves it by 2**-8: so the bound is well below one bf16 rounding (3.9e-3), not float32's.
    assert 0 < rel(emulated.numpy(), native.numpy()) < 1e-3


def test_regions_on_two_threads_do_not_share_copies():
    """The flag and the parameters' bf16 copies are per thread: a region that ends on one thread (freeing its
    copies) while another thread's forward runs on the same model changes nothing there."""
    import threading

    _, cm = make_pair(SMALL)
    idx = np.random.default_rng(0).integers(0, 50, (3, 12))
    with ct.autocast(), ct.no_grad():
        want = cm(idx)[0].numpy()
    results, errors = [], []

    def work():
        try:
            for _ in range(20):
                with ct.autocast(), ct.no_grad():
                    results.append(cm(idx)[0].numpy())
        except Exception as error:  # noqa: BLE001 (reported below)
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    with ct.no_grad():                          # this thread is not in a region: float32
        plain = cm(idx)[0].numpy()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(results) == 40 and all(np.array_equal(r, want) for r in results)
    assert not np.array_equal(plain, want)


WARN_PROBE = """
import warnings, numpy as np, ctransformer as ct
warnings.simplefilter("always")
lin = ct.nn.Linear(4, 3)
with warnings.catch_warnings(record=True) as seen:
    for _ in range(3):
        with ct.autocast(), ct.no_grad():
            lin(ct.tensor(np.ones((2, 4), np.float32)))
print(ct.amp.bf16_kernel())
for w in seen:
    print(w.category.__name__, "|", w.message)
"""


@pytest.mark.parametrize("level", ["x86-64-v3", None])
def test_emulated_bf16_warns_once_naming_the_cpu(level):
    """Where bf16 is emulated (a CPU without AVX512_BF16 or ARM's BF16, here stood in for by the kernel-level cap),
    the first region warns once that training runs no faster than float32 and names the CPU; a CPU with a native kernel
    (amx_bf16, avx512_bf16, neon_bf16) says nothing."""
    import os
    import subprocess
    import sys

    env = dict(os.environ)
    env.pop("CTRANSFORMER_KERNEL_LEVEL", None)
    if level:
        env["CTRANSFORMER_KERNEL_LEVEL"] = level
    run = subprocess.run([sys.executable, "-c", WARN_PROBE], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    kernel, *warned = run.stdout.splitlines()
    warned = [w for w in warned if w.startswith("BF16EmulationWarning")]
    if kernel in ("amx_bf16", "avx512_bf16", "neon_bf16"):
        assert warned == []
        return
    assert len(warned) == 1, run.stdout
    assert "bf16 is emulated on this CPU" in warned[0] and "no faster than float32" in warned[0]
    name = ct.amp._cpu_name()
    assert name and name in warned[0]
    if level:
        assert "CTRANSFORMER_KERNEL_LEVEL=x86-64-v3" in warned[0]
