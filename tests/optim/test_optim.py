"""ctransformer.optim's Adam / AdamW and clip_grad_norm_ against torch.optim / torch.nn.utils.

The same gradients reach both libraries: each step sets ``.grad`` by a backward of
``sum(p * G)`` (whose gradient is exactly G) with G = 2 (p - target) + noise computed from that
library's own parameters, so any difference is the optimizer's. Tolerance: rtol 1e-5, atol 1e-6
on the parameters after every one of 20 steps (the updates agree to float32 rounding).
"""
import pickle

import numpy as np
import pytest
import torch

import ctransformer as ct
from ctransformer import optim
from helpers import assert_close, rand
from kernel_levels import every_level

# Every test at each level's Adam loop (kernels/simd/adam.cpp).
at_every_level = every_level("loops")

RTOL, ATOL = 1e-5, 1e-6
SHAPES = [(4, 3), (3,), (2, 2, 5)]


def make_params(shapes=SHAPES, seed=0):
    arrays = [rand(s, seed=seed + i) for i, s in enumerate(shapes)]
    ours = [ct.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    return ours, theirs


def quadratic_grad(values, step, index):
    """G = 2 (p - target) + noise, in float32: the gradient of a noisy quadratic at p."""
    target = rand(values.shape, seed=100 + index)
    noise = rand(values.shape, seed=1000 * step + index, scale=0.5)
    return (np.float32(2.0) * (values - target) + noise).astype(np.float32)


def set_grads(ours, theirs, step, skip=()):
    """Run sum(p * G).backward() in both libraries, so p.grad == G exactly; `skip` keeps grad None."""
    for i, (p, q) in enumerate(zip(ours, theirs)):
        if i in skip:
            continue
        (p * ct.tensor(quadratic_grad(p.numpy(), step, i))).sum().backward()
        (q * torch.tensor(quadratic_grad(q.detach().numpy(), step, i))).sum().backward()


def run_both(opt, topt, ours, theirs, steps=20, skip=lambda step: ()):
    for step in range(steps):
        opt.zero_grad()
        topt.zero_grad()
        set_grads(ours, theirs, step, skip(step))
        opt.step()
        topt.step()
        for i, (p, q) in enumerate(zip(ours, theirs)):
            assert_close(p, q, rtol=RTOL, atol=ATOL, what=f"step {step + 1}, param {i}")


CONFIGS = [
    ("Adam", dict()),
    ("Adam", dict(lr=1e-2, weight_decay=0.1)),
    ("Adam", dict(lr=0.5, betas=(0.9, 0.98), eps=1e-9)),  # the Annotated Transformer's Adam (lr 1 times a schedule)
    ("AdamW", dict()),
    ("AdamW", dict(lr=1e-2, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.3)),
]


@pytest.mark.parametrize("name,kwargs", CONFIGS)
def test_trajectory_matches_torch(name, kwargs):
    ours, theirs = make_params()
    opt = getattr(optim, name)(ours, **kwargs)
    topt = getattr(torch.optim, name)(theirs, **kwargs)
    run_both(opt, topt, ours, theirs)


FMA_CPU = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


@pytest.mark.skipif(not FMA_CPU, reason="torch's kernels fuse multiply-adds only on AVX2/AVX512 builds")
@pytest.mark.parametrize("name,kwargs", [c for c in CONFIGS if not (c[0] == "Adam" and c[1].get("weight_decay"))]
                         + [("AdamW", dict(betas=(0.4, 0.9), weight_decay=0.2))])
def test_moments_are_bit_identical_to_torch(name, kwargs):
    """With gradients that do not depend on p, exp_avg and exp_avg_sq equal torch's bit for bit
    over 20 steps: the update rounds as torch's CPU kernels do (fused add-alpha, lerp, addcmul), at each
    kernel level whose loops fuse them (not the portable level on x86-64: SSE2 has no FMA).
    The parameters can differ by an ulp: torch's float sqrt (MKL) is not correctly rounded on
    ~17% of values, ours (std::sqrt) is. Adam's L2 term makes the moments depend on p, so it is
    covered by the trajectory tests instead."""
    if not ct.build_info()["loops"]["fused_multiply_add"]:
        pytest.skip(f"the SIMD loops of level {ct.kernel_level()} have no fused multiply-add")
    ours, theirs = make_params()
    opt = getattr(optim, name)(ours, **kwargs)
    topt = getattr(torch.optim, name)(theirs, **kwargs)
    for step in range(20):
        opt.zero_grad()
        topt.zero_grad()
        for i, (p, q) in enumerate(zip(ours, theirs)):
            g = rand(p.shape, seed=10 * step + i)
            (p * ct.tensor(g)).sum().backward()
            (q * torch.tensor(g)).sum().backward()
        opt.step()
        topt.step()
        sd, tsd = opt.state_dict()["state"], topt.state_dict()["state"]
        for i in sd:
            np.testing.assert_array_equal(sd[i]["exp_avg"], tsd[i]["exp_avg"].numpy())
            np.testing.assert_array_equal(sd[i]["exp_avg_sq"], tsd[i]["exp_avg_sq"].numpy())


@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_two_param_groups_match_torch(name):
    ours, theirs = make_params()

    def groups(ps):
        return [{"params": ps[:2], "lr": 3e-2, "weight_decay": 0.2},
                {"params": [ps[2]], "lr": 1e-3, "betas": (0.85, 0.99), "weight_decay": 0.0}]

    opt = getattr(optim, name)(groups(ours), lr=5e-3, eps=1e-7)
    topt = getattr(torch.optim, name)(groups(theirs), lr=5e-3, eps=1e-7)
    for g, tg in zip(opt.param_groups, topt.param_groups):
        for key in ("lr", "betas", "eps", "weight_decay"):
            assert g[key] == tg[key], key
    run_both(opt, topt, ours, theirs)


def test_real_loss_backward_matches_torch():
    """Gradients from each library's own backward (linear + cross-entropy); rtol 1e-4, atol 1e-5
    because the two backward passes differ by float32 rounding that Adam's normalisation can amplify."""
    w, b = rand((5, 4), seed=1, scale=0.5), rand((5,), seed=2, scale=0.1)
    ours = [ct.tensor(w, requires_grad=True), ct.tensor(b, requires_grad=True)]
    theirs = [torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)]
    opt = optim.AdamW(ours, lr=1e-2, weight_decay=0.05)
    topt = torch.optim.AdamW(theirs, lr=1e-2, weight_decay=0.05)
    for step in range(20):
        x = rand((8, 4), seed=50 + step)
        y = np.random.default_rng(step).integers(0, 5, size=8)
        opt.zero_grad()
        topt.zero_grad()
        ct.functional.cross_entropy(ct.functional.linear(ct.tensor(x), *ours), y).backward()
        torch.nn.functional.cross_entropy(torch.nn.functional.linear(torch.tensor(x), *theirs),
                                          torch.tensor(y)).backward()
        opt.step()
        topt.step()
        for p, q in zip(ours, theirs):
            assert_close(p, q, rtol=1e-4, atol=1e-5, what=f"step {step + 1}")


def test_params_without_grad_are_skipped_like_torch():
    """A parameter whose grad is None is not updated and its step count does not advance."""
    ours, theirs = make_params()
    opt = optim.AdamW(ours, lr=1e-2, weight_decay=0.1)
    topt = torch.optim.AdamW(theirs, lr=1e-2, weight_decay=0.1)
    run_both(opt, topt, ours, theirs, skip=lambda step: (1,) if step % 3 else (0, 2))
    steps = {i: s["step"] for i, s in opt.state_dict()["state"].items()}
    assert steps == {i: int(s["step"]) for i, s in topt.state_dict()["state"].items()}


def test_param_never_stepped_has_no_state_and_is_unchanged():
    ours, _ = make_params()
    before = ours[1].numpy().copy()
    opt = optim.Adam(ours, lr=0.1)
    for step in range(3):
        opt.zero_grad()
        (ours[0] * 2.0).sum().backward()
        opt.step()
    np.testing.assert_array_equal(ours[1].numpy(), before)
    assert set(opt.state_dict()["state"]) == {0}


def test_zero_grad():
    ours, _ = make_params()
    opt = optim.Adam(ours)
    (ours[0] * 3.0).sum().backward()
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(ours[0].grad.numpy(), np.zeros((4, 3), np.float32))
    opt.zero_grad()
    assert all(p.grad is None for p in ours)


def test_param_groups_lr_write_takes_effect():
    """opt.param_groups[0]["lr"] = x, as nanoGPT and jadore801120's ScheduledOptim do, changes the update."""
    ours, theirs = make_params()
    opt = optim.Adam(ours, lr=1e-3)
    topt = torch.optim.Adam(theirs, lr=1e-3)
    for step in range(20):
        lr = 1e-2 * (step + 1) / 20
        for g in opt.param_groups:
            g["lr"] = lr
        for g in topt.param_groups:
            g["lr"] = lr
        assert opt.param_groups[0]["lr"] == lr
        opt.zero_grad()
        topt.zero_grad()
        set_grads(ours, theirs, step)
        opt.step()
        topt.step()
        for p, q in zip(ours, theirs):
            assert_close(p, q, rtol=RTOL, atol=ATOL, what=f"step {step + 1}")
    opt.param_groups[0]["betas"] = (0.5, 0.6)
    opt.param_groups[0]["weight_decay"] = 0.25
    assert opt.param_groups[0]["betas"] == (0.5, 0.6) and opt.param_groups[0]["weight_decay"] == 0.25


def test_param_group_proxy_reads_like_a_dict():
    ours, _ = make_params()
    opt = optim.Adam([{"params": ours[:1]}, {"params": ours[1:], "lr": 0.5}], lr=0.1)
    g = opt.param_groups[1]
    assert set(g.keys()) == {"params", "lr", "betas", "eps", "weight_decay"}
    assert "lr" in g and "initial_lr" not in g and len(g) == 5
    assert g["lr"] == 0.5 and opt.param_groups[0]["lr"] == 0.1
    assert [p.shape for p in g["params"]] == [(3,), (2, 2, 5)]
    assert g.get("initial_lr", 7) == 7
    assert dict(g.items())["eps"] == 1e-8
    assert opt.defaults == {"lr": 0.1, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0}


def test_add_param_group_takes_defaults():
    ours, theirs = make_params()
    opt = optim.AdamW(ours[:2], lr=1e-2, weight_decay=0.1)
    topt = torch.optim.AdamW(theirs[:2], lr=1e-2, weight_decay=0.1)
    opt.add_param_group({"params": [ours[2]], "lr": 3e-2})
    topt.add_param_group({"params": [theirs[2]], "lr": 3e-2})
    assert opt.param_groups[1]["weight_decay"] == 0.1
    run_both(opt, topt, ours, theirs)


def test_params_share_storage_with_the_model():
    """The optimizer updates the caller's tensors in place (views taken before step see the change)."""
    ours, _ = make_params()
    view = ours[0].numpy()
    opt = optim.Adam(ours, lr=0.1)
    (ours[0] * 1.0).sum().backward()
    opt.step()
    np.testing.assert_array_equal(view, ours[0].numpy())
    assert not np.array_equal(view, rand((4, 3), seed=0))


# --- state dicts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_state_dict_resume_is_exact(name):
    """10 steps, save, load into a fresh optimizer (other hyperparameters), 10 more = 20 uninterrupted."""
    def groups(ps, lr):
        return [{"params": ps[:2], "lr": lr, "weight_decay": 0.1}, {"params": ps[2:], "weight_decay": 0.0}]

    a, _ = make_params()
    opt_a = getattr(optim, name)(groups(a, 2e-2), lr=1e-2, betas=(0.9, 0.98))
    b, _ = make_params()
    opt_b = getattr(optim, name)(groups(b, 2e-2), lr=1e-2, betas=(0.9, 0.98))

    def one_step(opt, ps, step):
        opt.zero_grad()
        for i, p in enumerate(ps):
            (p * ct.tensor(quadratic_grad(p.numpy(), step, i))).sum().backward()
        opt.step()

    for step in range(20):
        one_step(opt_a, a, step)
    for step in range(10):
        one_step(opt_b, b, step)
    saved = pickle.loads(pickle.dumps(opt_b.state_dict()))  # plain Python + NumPy, no live references
    fresh = getattr(optim, name)(groups(b, 0.5), lr=0.3, betas=(0.5, 0.5))
    fresh.load_state_dict(saved)
    assert fresh.param_groups[0]["lr"] == 2e-2 and fresh.param_groups[1]["betas"] == (0.9, 0.98)
    del opt_b
    for step in range(10, 20):
        one_step(fresh, b, step)
    for p, q in zip(a, b):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
    sa, sb = opt_a.state_dict(), fresh.state_dict()
    for i in sa["state"]:
        assert sa["state"][i]["step"] == sb["state"][i]["step"] == 20
        np.testing.assert_array_equal(sa["state"][i]["exp_avg"], sb["state"][i]["exp_avg"])
        np.testing.assert_array_equal(sa["state"][i]["exp_avg_sq"], sb["state"][i]["exp_avg_sq"])


def test_state_dict_is_a_copy():
    ours, _ = make_params()
    opt = optim.Adam(ours)
    (ours[0] * 2.0).sum().backward()
    opt.step()
    saved = opt.state_dict()
    m = saved["state"][0]["exp_avg"].copy()
    opt.step()
    np.testing.assert_array_equal(saved["state"][0]["exp_avg"], m)
    assert saved["state"][0]["step"] == 1


def test_state_dict_layout_matches_torch():
    ours, theirs = make_params()
    opt = optim.AdamW(ours, lr=1e-2)
    topt = torch.optim.AdamW(theirs, lr=1e-2)
    set_grads(ours, theirs, 0)
    opt.step()
    topt.step()
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert set(sd) == set(tsd) == {"state", "param_groups"}
    assert set(sd["state"]) == set(tsd["state"])
    for i in sd["state"]:
        assert set(sd["state"][i]) == set(tsd["state"][i])
        assert sd["state"][i]["step"] == int(tsd["state"][i]["step"])
        assert_close(sd["state"][i]["exp_avg"], tsd["state"][i]["exp_avg"], rtol=RTOL, atol=ATOL)
        assert_close(sd["state"][i]["exp_avg_sq"], tsd["state"][i]["exp_avg_sq"], rtol=RTOL, atol=ATOL)
    assert set(sd["param_groups"][0]) <= set(tsd["param_groups"][0])
    for key in sd["param_groups"][0]:
        assert sd["param_groups"][0][key] == tsd["param_groups"][0][key], key


@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_loads_a_torch_state_dict(name):
    """torch's optimizer state after 10 steps, loaded into ours on torch's parameters, continues as torch."""
    ours, theirs = make_params()
    topt = getattr(torch.optim, name)(theirs, lr=2e-2, weight_decay=0.1)
    for step in range(10):
        topt.zero_grad()
        for i, q in enumerate(theirs):
            (q * torch.tensor(quadratic_grad(q.detach().numpy(), step, i))).sum().backward()
        topt.step()
    ours = [ct.tensor(q.detach().numpy(), requires_grad=True) for q in theirs]
    opt = getattr(optim, name)(ours, lr=0.5)
    opt.load_state_dict(topt.state_dict())
    assert opt.param_groups[0]["lr"] == 2e-2
    for step in range(10, 20):
        opt.zero_grad()
        topt.zero_grad()
        set_grads(ours, theirs, step)
        opt.step()
        topt.step()
        for p, q in zip(ours, theirs):
            assert_close(p, q, rtol=RTOL, atol=ATOL, what=f"step {step + 1}")


def test_load_state_dict_rejects_mismatches():
    ours, _ = make_params()
    opt = optim.Adam(ours, lr=1e-2)
    (ours[0] * 2.0).sum().backward()
    opt.step()
    good = opt.state_dict()

    other, _ = make_params(shapes=[(4, 3), (3,)])
    with pytest.raises(ValueError, match=r"state_dict\['param_groups'\]\[0\] has 3 params"):
        optim.Adam(other).load_state_dict(good)
    two_groups, _ = make_params()
    with pytest.raises(ValueError, match="state_dict has 1 parameter groups, the optimizer has 2"):
        optim.Adam([{"params": two_groups[:1]}, {"params": two_groups[1:]}]).load_state_dict(good)
    wrong_shape, _ = make_params(shapes=[(3, 4), (3,), (2, 2, 5)])
    fresh = optim.Adam(wrong_shape, lr=0.7)
    with pytest.raises(ValueError, match=r"exp_avg has shape \(4, 3\), the parameter \(3, 4\)"):
        fresh.load_state_dict(good)
    assert fresh.param_groups[0]["lr"] == 0.7  # nothing changed
    with pytest.raises(ValueError, match="missing key 'state'"):
        opt.load_state_dict({"param_groups": good["param_groups"]})
    bad = pickle.loads(pickle.dumps(good))
    del bad["state"][0]["exp_avg_sq"]
    with pytest.raises(ValueError, match=r"\['state'\]\[0\]: missing key 'exp_avg_sq'"):
        opt.load_state_dict(bad)
    bad = pickle.loads(pickle.dumps(good))
    bad["state"][7] = bad["state"][0]
    with pytest.raises(ValueError, match=r"\['state'\]\[7\]: no parameter has this index"):
        opt.load_state_dict(bad)
    bad = pickle.loads(pickle.dumps(good))
    bad["param_groups"][0]["lr"] = -1.0
    with pytest.raises(ValueError, match="invalid learning rate"):
        opt.load_state_dict(bad)
    bad = pickle.loads(pickle.dumps(good))
    bad["param_groups"][0]["amsgrad"] = True
    with pytest.raises(ValueError, match="amsgrad=True is not supported"):
        opt.load_state_dict(bad)
    with pytest.raises(ValueError, match="decoupled_weight_decay"):
        optim.AdamW(ours).load_state_dict(good)
    with pytest.raises(TypeError, match="expected a dict"):
        opt.load_state_dict([1, 2])


# --- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs,match", [
    (dict(lr=-1e-3), r"Adam: invalid learning rate lr -0\.001, expected lr >= 0"),
    (dict(betas=(1.0, 0.999)), r"betas\[0\]"),
    (dict(betas=(0.9, -0.1)), r"betas\[1\]"),
    (dict(eps=-1.0), "invalid eps"),
    (dict(weight_decay=-0.1), "invalid weight_decay"),
])
def test_bad_hyperparameters(kwargs, match):
    ours, _ = make_params()
    with pytest.raises(ValueError, match=match):
        optim.Adam(ours, **kwargs)


def test_bad_params():
    ours, _ = make_params()
    with pytest.raises(ValueError, match="Adam: params: got an empty parameter list"):
        optim.Adam([])
    with pytest.raises(ValueError, match="empty"):
        optim.AdamW(iter([]))
    with pytest.raises(TypeError, match=r"Adam: params\[1\]: expected a ctransformer.Tensor, got ndarray"):
        optim.Adam([ours[0], np.zeros(3, np.float32)])
    with pytest.raises(TypeError, match=r"params\[0\]: expected a ctransformer.Tensor, got Tensor"):
        optim.Adam([torch.zeros(3)])
    with pytest.raises(TypeError, match="a single Tensor; wrap it in a list"):
        optim.Adam(ours[0])
    with pytest.raises(TypeError, match="got a set"):
        optim.Adam(set(ours))
    with pytest.raises(TypeError, match="single dict"):
        optim.Adam({"params": ours})
    with pytest.raises(TypeError, match="expected a number, got str"):
        optim.Adam([{"params": ours, "lr": "0.1"}])
    with pytest.raises(TypeError, match=r"params\[1\]: expected a dict like the other groups"):
        optim.Adam([{"params": ours[:1]}, ours[1]])
    with pytest.raises(ValueError, match="needs a 'params' entry"):
        optim.Adam([{"lr": 0.1}])
    with pytest.raises(ValueError, match="unknown key 'momentum'"):
        optim.Adam([{"params": ours, "momentum": 0.9}])
    with pytest.raises(ValueError, match=r"param_groups\[1\]: params is an empty list"):
        optim.Adam([{"params": ours}, {"params": []}])
    with pytest.raises(ValueError, match="more than one parameter group"):
        optim.Adam([{"params": ours}, {"params": ours[:1]}])
    with pytest.raises(ValueError, match="appears twice"):
        optim.Adam([ours[0], ours[0]])
    with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor"):
        optim.Adam([ours[0] * 2.0])
    with pytest.raises(ValueError, match=r"betas: expected a pair"):
        optim.Adam(ours, betas=(0.9,))


def test_bad_param_group_writes():
    ours, _ = make_params()
    opt = optim.Adam(ours, lr=0.1)
    with pytest.raises(ValueError, match=r"Adam.param_groups\[0\]: invalid learning rate"):
        opt.param_groups[0]["lr"] = -0.5
    assert opt.param_groups[0]["lr"] == 0.1
    with pytest.raises(ValueError, match="betas"):
        opt.param_groups[0]["betas"] = (0.9, 1.5)
    with pytest.raises(KeyError, match="momentum"):
        opt.param_groups[0]["momentum"] = 0.9
    with pytest.raises(KeyError, match="initial_lr"):
        opt.param_groups[0]["initial_lr"]
    with pytest.raises(ValueError, match="cannot be replaced"):
        opt.param_groups[0]["params"] = []


# --- clip_grad_norm_ -----------------------------------------------------------------------------


@pytest.mark.parametrize("max_norm,norm_type", [(0.5, 2.0), (1e3, 2.0), (1.0, float("inf")), (2.0, 1.0), (1.0, 3.0)])
def test_clip_grad_norm_matches_torch(max_norm, norm_type):
    """Total norm rtol 1e-6; clipped gradients rtol 1e-5 / atol 1e-7; a param without grad is skipped."""
    ours, theirs = make_params(shapes=[(4, 3), (3,), (2, 2, 5), (6,)])
    set_grads(ours, theirs, 0, skip=(3,))
    total = optim.clip_grad_norm_(ours, max_norm, norm_type=norm_type)
    ttotal = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type=norm_type)
    assert isinstance(total, float)
    assert total == pytest.approx(ttotal.item(), rel=1e-6)
    assert ours[3].grad is None and theirs[3].grad is None
    for p, q in zip(ours[:3], theirs[:3]):
        assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-7)


def test_clip_grad_norm_single_tensor_and_no_grads():
    ours, theirs = make_params()
    set_grads(ours, theirs, 0)
    assert optim.clip_grad_norm_(ours[0], 0.1) == pytest.approx(
        torch.nn.utils.clip_grad_norm_(theirs[0], 0.1).item(), rel=1e-6)
    assert_close(ours[0].grad, theirs[0].grad, rtol=1e-5, atol=1e-7)
    fresh, _ = make_params()
    assert optim.clip_grad_norm_(fresh, 1.0) == 0.0


def test_clip_grad_norm_bad_input():
    ours, _ = make_params()
    with pytest.raises(TypeError, match=r"clip_grad_norm_: parameters\[0\]: expected a ctransformer.Tensor"):
        optim.clip_grad_norm_([1.0], 1.0)
    with pytest.raises(ValueError, match="norm_type must be > 0"):
        optim.clip_grad_norm_(ours, 1.0, norm_type=0.0)
    (ours[0] * float("inf")).sum().backward()
    with pytest.raises(RuntimeError, match="non-finite"):
        optim.clip_grad_norm_(ours, 1.0, error_if_nonfinite=True)
