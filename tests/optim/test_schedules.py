"""Learning-rate schedules against torch.optim.lr_scheduler and the blog posts' own code.

Every lr is a double computed with the same operations in the same order as the reference,
so the sequences are compared for exact equality (tolerance 0).
"""
import math

import numpy as np
import pytest
import torch
from torch.optim.lr_scheduler import LambdaLR as TorchLambdaLR
from torch.optim.lr_scheduler import StepLR as TorchStepLR

import ctransformer as ct
from ctransformer import optim
from helpers import assert_close, rand


# --- the references, as the blog posts write them -----------------------------------------------

def annotated_rate(step, model_size, factor, warmup):
    """The Annotated Transformer's rate (002_5b1a8dee14bb0756.txt), verbatim."""
    if step == 0:
        step = 1
    return factor * (
            model_size ** (-0.5) * min(step ** (-0.5), step * warmup ** (-1.5))
    )


class ReferenceScheduledOptim():
    """jadore801120's ScheduledOptim (000_5181b81d5a7c3b6a.txt), verbatim apart from the comments."""

    def __init__(self, optimizer, lr_mul, d_model, n_warmup_steps):
        self._optimizer = optimizer
        self.lr_mul = lr_mul
        self.d_model = d_model
        self.n_warmup_steps = n_warmup_steps
        self.n_steps = 0

    def step_and_update_lr(self):
        self._update_learning_rate()
        self._optimizer.step()

    def zero_grad(self):
        self._optimizer.zero_grad()

    def _get_lr_scale(self):
        d_model = self.d_model
        n_steps, n_warmup_steps = self.n_steps, self.n_warmup_steps
        return (d_model ** -0.5) * min(n_steps ** (-0.5), n_steps * n_warmup_steps ** (-1.5))

    def _update_learning_rate(self):
        self.n_steps += 1
        lr = self.lr_mul * self._get_lr_scale()
        for param_group in self._optimizer.param_groups:
            param_group['lr'] = lr


def nanogpt_get_lr(it, warmup_iters, lr_decay_iters, learning_rate, min_lr):
    """karpathy/nanoGPT train.py's get_lr, with its globals as arguments."""
    # 1) linear warmup for warmup_iters steps
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    # 2) if it > lr_decay_iters, return min learning rate
    if it > lr_decay_iters:
        return min_lr
    # 3) in between, use cosine decay down to min learning rate
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    assert 0 <= decay_ratio <= 1
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))  # coeff ranges 0..1
    return min_lr + coeff * (learning_rate - min_lr)


def dummy(n=1):
    """A parameter pair per group, for optimizers whose lr is all we look at."""
    return [ct.tensor(np.zeros((1, 1), np.float32), requires_grad=True) for _ in range(n)], \
           [torch.zeros((1, 1), requires_grad=True) for _ in range(n)]


# --- rate / NoamLambda ---------------------------------------------------------------------------

@pytest.mark.parametrize("example", [(512, 1, 4000), (512, 1, 8000), (256, 1, 4000), (512, 2, 4000), (64, 0.5, 10)])
def test_rate_equals_the_annotated_transformers(example):
    steps = [0, 1, 2, 3, 10, 99, 3999, 4000, 4001, 7999, 8000, 8001, 19999, 10 ** 6]
    for step in steps:
        assert optim.rate(step, *example) == annotated_rate(step, *example), step
        assert optim.NoamLambda(*example)(step) == annotated_rate(step, *example), step


def test_annotated_transformer_learning_schedule_example():
    """The blog's plot: Adam(lr=1, betas=(0.9, 0.98), eps=1e-9) + LambdaLR(rate) over 20000 steps,
    lr read before each step, for the three (model_size, factor, warmup) of the figure; ours with
    a Python lambda and with the C++ NoamLambda."""
    for example in [[512, 1, 4000], [512, 1, 8000], [256, 1, 4000]]:
        dummy_model = torch.nn.Linear(1, 1)
        optimizer = torch.optim.Adam(dummy_model.parameters(), lr=1, betas=(0.9, 0.98), eps=1e-9)
        lr_scheduler = TorchLambdaLR(optimizer=optimizer, lr_lambda=lambda step: annotated_rate(step, *example))
        expected = []
        for step in range(20000):
            expected.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            lr_scheduler.step()

        lambdas = [optim.NoamLambda(*example)]
        if example == [512, 1, 4000]:  # a Python callable too, once (it costs a Python call per step)
            lambdas.append(lambda step: optim.rate(step, *example))
        for lr_lambda in lambdas:
            params, _ = dummy(2)
            opt = optim.Adam(params, lr=1, betas=(0.9, 0.98), eps=1e-9)
            sched = optim.LambdaLR(opt, lr_lambda=lr_lambda)
            got = []
            for step in range(20000):
                got.append(opt.param_groups[0]["lr"])
                opt.step()
                sched.step()
            assert got == expected
            assert sched.last_epoch == 20000 and sched.get_last_lr() == [lr_scheduler.get_last_lr()[0]]
        assert max(expected) == expected[example[2]]  # the peak is at the end of warmup


def test_lambda_lr_per_group_lambdas_match_torch():
    ours, theirs = dummy(2)
    lambdas = [lambda e: 0.95 ** e, lambda e: e // 3 + 1]
    opt = optim.Adam([{"params": [ours[0]], "lr": 0.1}, {"params": [ours[1]], "lr": 0.02}])
    topt = torch.optim.Adam([{"params": [theirs[0]], "lr": 0.1}, {"params": [theirs[1]], "lr": 0.02}])
    sched = optim.LambdaLR(opt, [optim.NoamLambda(16, 2.0, 5), lambdas[1]])
    tsched = TorchLambdaLR(topt, [lambda e: annotated_rate(e, 16, 2.0, 5), lambdas[1]])
    assert sched.base_lrs == tsched.base_lrs == [0.1, 0.02]
    for _ in range(30):
        assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in topt.param_groups]
        assert sched.get_last_lr() == tsched.get_last_lr()
        topt.step()
        sched.step()
        tsched.step()


def test_lambda_lr_drives_the_update_like_torch():
    """The scheduled lr reaches the Adam update: 20 steps with gradients, parameters match
    torch (rtol 1e-5, atol 1e-6)."""
    w = rand((3, 4), seed=3)
    p, q = ct.tensor(w, requires_grad=True), torch.tensor(w, requires_grad=True)
    opt = optim.Adam([p], lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    topt = torch.optim.Adam([q], lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    sched = optim.LambdaLR(opt, optim.NoamLambda(32, 1.0, 10))
    tsched = TorchLambdaLR(topt, lambda s: annotated_rate(s, 32, 1.0, 10))
    for step in range(20):
        g = rand((3, 4), seed=100 + step)
        opt.zero_grad()
        topt.zero_grad()
        (p * ct.tensor(g)).sum().backward()
        (q * torch.tensor(g)).sum().backward()
        opt.step()
        topt.step()
        sched.step()
        tsched.step()
        assert_close(p, q, rtol=1e-5, atol=1e-6, what=f"step {step + 1}")


# --- StepLR --------------------------------------------------------------------------------------

@pytest.mark.parametrize("step_size,gamma", [(3, 0.5), (1, 0.9), (5, 0.1)])
def test_step_lr_matches_torch(step_size, gamma):
    """The toy translator's schedule is Adam(lr=2e-3) + StepLR(step_size=3, gamma=0.5), stepped every epoch."""
    ours, theirs = dummy(2)
    opt = optim.Adam([{"params": [ours[0]]}, {"params": [ours[1]], "lr": 1e-2}], lr=2e-3)
    topt = torch.optim.Adam([{"params": [theirs[0]]}, {"params": [theirs[1]], "lr": 1e-2}], lr=2e-3)
    sched = optim.StepLR(opt, step_size=step_size, gamma=gamma)
    tsched = TorchStepLR(topt, step_size=step_size, gamma=gamma)
    for epoch in range(20):
        assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in topt.param_groups], epoch
        assert sched.get_last_lr() == tsched.get_last_lr()
        topt.step()
        sched.step()
        tsched.step()


def test_chained_schedulers_share_initial_lr_like_torch():
    """A second scheduler on the same optimizer takes the first one's initial_lr as its base
    and works on the lr the first one left (torch's chaining)."""
    ours, theirs = dummy()
    opt, topt = optim.Adam(ours, lr=0.1), torch.optim.Adam(theirs, lr=0.1)
    s1, t1 = optim.LambdaLR(opt, lambda e: 0.9 ** e), TorchLambdaLR(topt, lambda e: 0.9 ** e)
    s2, t2 = optim.StepLR(opt, 2, 0.5), TorchStepLR(topt, 2, 0.5)
    assert s2.base_lrs == t2.base_lrs == [0.1]
    assert opt.param_groups[0]["initial_lr"] == topt.param_groups[0]["initial_lr"] == 0.1
    for _ in range(10):
        topt.step()
        for s, t in ((s1, t1), (s2, t2)):
            s.step()
            t.step()
        assert opt.param_groups[0]["lr"] == topt.param_groups[0]["lr"]


# --- ScheduledOptim (jadore801120's) -----------------------------------------------------------

@pytest.mark.parametrize("lr_mul,d_model,n_warmup_steps", [(2.0, 512, 4000), (0.5, 64, 10), (1.0, 32, 1)])
def test_scheduled_optim_matches_the_reference(lr_mul, d_model, n_warmup_steps):
    """jadore801120's ScheduledOptim around torch's Adam(betas=(0.9, 0.98), eps=1e-9) (train.py's settings):
    lrs equal exactly, parameters rtol 1e-5 / atol 1e-6 over 20 steps."""
    w = rand((4, 4), seed=7)
    p, q = ct.tensor(w, requires_grad=True), torch.tensor(w, requires_grad=True)
    ours = optim.ScheduledOptim(optim.Adam([p], betas=(0.9, 0.98), eps=1e-09), lr_mul, d_model, n_warmup_steps)
    theirs = ReferenceScheduledOptim(torch.optim.Adam([q], betas=(0.9, 0.98), eps=1e-09), lr_mul, d_model,
                                     n_warmup_steps)
    for step in range(20):
        g = rand((4, 4), seed=200 + step)
        ours.zero_grad()
        theirs.zero_grad()
        (p * ct.tensor(g)).sum().backward()
        (q * torch.tensor(g)).sum().backward()
        ours.step_and_update_lr()
        theirs.step_and_update_lr()
        assert ours.n_steps == theirs.n_steps == step + 1
        assert ours.optimizer.param_groups[0]["lr"] == theirs._optimizer.param_groups[0]["lr"]
        assert_close(p, q, rtol=1e-5, atol=1e-6, what=f"step {step + 1}")
    assert p.grad is not None
    ours.zero_grad()
    assert p.grad is None


def test_scheduled_optim_lr_over_many_steps():
    ours_p, theirs_p = dummy()
    ours = optim.ScheduledOptim(optim.Adam(ours_p), 2.0, 512, 4000)
    theirs = ReferenceScheduledOptim(torch.optim.Adam(theirs_p), 2.0, 512, 4000)
    for _ in range(10000):
        ours.step_and_update_lr()
        theirs.step_and_update_lr()
        assert ours.optimizer.param_groups[0]["lr"] == theirs._optimizer.param_groups[0]["lr"]
    saved = ours.state_dict()
    again = optim.ScheduledOptim(optim.Adam(dummy()[0]), 2.0, 512, 4000)
    again.load_state_dict(saved)
    again.step_and_update_lr()
    theirs.step_and_update_lr()
    assert again.optimizer.param_groups[0]["lr"] == theirs._optimizer.param_groups[0]["lr"]


# --- nanoGPT's cosine with warmup ----------------------------------------------------------------

@pytest.mark.parametrize("warmup_iters,lr_decay_iters,learning_rate,min_lr",
                         [(2000, 600000, 6e-4, 6e-5), (100, 5000, 1e-3, 1e-4), (0, 10, 1.0, 0.0)])
def test_cosine_with_warmup_equals_nanogpt(warmup_iters, lr_decay_iters, learning_rate, min_lr):
    its = sorted(set(list(range(0, 3 * max(warmup_iters, 1) + 3)) + [lr_decay_iters - 1, lr_decay_iters,
                                                                       lr_decay_iters + 1, lr_decay_iters * 2]
                     + list(range(0, lr_decay_iters + 2, max(1, lr_decay_iters // 997)))))
    for it in its:
        expected = nanogpt_get_lr(it, warmup_iters, lr_decay_iters, learning_rate, min_lr)
        assert optim.cosine_with_warmup(it, warmup_iters, lr_decay_iters, learning_rate, min_lr) == expected, it


def test_cosine_warmup_lr_follows_nanogpt_loop():
    """nanoGPT sets lr = get_lr(iter_num) before iteration iter_num; the scheduler's lr before
    iteration it (constructed at it = 0, stepped after each iteration) is the same, per group."""
    ours, _ = dummy(2)
    opt = optim.AdamW([{"params": [ours[0]], "weight_decay": 0.1}, {"params": [ours[1]], "lr": 3e-4}], lr=6e-4)
    sched = optim.CosineWarmupLR(opt, warmup_iters=20, lr_decay_iters=200, min_lr=6e-5)
    for it in range(260):
        assert opt.param_groups[0]["lr"] == nanogpt_get_lr(it, 20, 200, 6e-4, 6e-5)
        assert opt.param_groups[1]["lr"] == nanogpt_get_lr(it, 20, 200, 3e-4, 6e-5)
        opt.step()
        sched.step()


# --- scheduler state dicts -----------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda o: optim.LambdaLR(o, optim.NoamLambda(64, 1.0, 8)),
    lambda o: optim.StepLR(o, 4, 0.5),
    lambda o: optim.CosineWarmupLR(o, 5, 30, 1e-4),
])
def test_scheduler_state_dict_resume(make):
    """Scheduler + optimizer saved at epoch 10 and loaded into fresh ones continue exactly."""
    a, _ = dummy()
    opt_a = optim.Adam(a, lr=1e-2)
    sched_a = make(opt_a)
    b, _ = dummy()
    opt_b = optim.Adam(b, lr=1e-2)
    sched_b = make(opt_b)
    lrs_a = []
    for _ in range(20):
        sched_a.step()
        lrs_a.append(opt_a.param_groups[0]["lr"])
    for _ in range(10):
        sched_b.step()
    saved_sched, saved_opt = sched_b.state_dict(), opt_b.state_dict()
    assert set(saved_sched) >= {"last_epoch", "base_lrs", "_last_lr", "_step_count"}
    opt_c = optim.Adam(b, lr=1e-2)
    sched_c = make(opt_c)
    opt_c.load_state_dict(saved_opt)
    sched_c.load_state_dict(saved_sched)
    assert sched_c.last_epoch == 10
    lrs_c = []
    for _ in range(10):
        sched_c.step()
        lrs_c.append(opt_c.param_groups[0]["lr"])
    assert lrs_c == lrs_a[10:]


# --- bad input -----------------------------------------------------------------------------------

def test_bad_schedule_arguments():
    ours, theirs = dummy()
    opt = optim.Adam(ours)
    with pytest.raises(ValueError, match="rate: warmup must be > 0"):
        optim.rate(1, 512, 1, 0)
    with pytest.raises(ValueError, match="rate: model_size must be > 0"):
        optim.rate(1, 0, 1, 4000)
    with pytest.raises(ValueError, match="rate: step must be >= 0"):
        optim.rate(-1, 512, 1, 4000)
    with pytest.raises(ValueError, match="NoamLambda: warmup must be > 0"):
        optim.NoamLambda(512, 1, -5)
    with pytest.raises(TypeError, match="LambdaLR: optimizer must be a ctransformer.optim optimizer"):
        optim.LambdaLR(torch.optim.Adam(theirs), lambda e: 1.0)
    with pytest.raises(TypeError, match="LambdaLR: lr_lambda: expected a callable"):
        optim.LambdaLR(opt, 0.5)
    with pytest.raises(ValueError, match="expected 1 lr_lambdas"):
        optim.LambdaLR(opt, [lambda e: 1.0, lambda e: 2.0])
    with pytest.raises(TypeError, match="lr_lambda must return a number"):
        optim.LambdaLR(opt, lambda e: "fast")
    with pytest.raises(ZeroDivisionError):  # the lambda's own error comes through
        optim.LambdaLR(opt, lambda e: 1 / e)
    with pytest.raises(ValueError, match="StepLR: step_size must be a positive integer"):
        optim.StepLR(opt, 0)
    with pytest.raises(ValueError, match="CosineWarmupLR: lr_decay_iters must be > warmup_iters"):
        optim.CosineWarmupLR(opt, 100, 100, 0.0)
    with pytest.raises(ValueError, match="cosine_with_warmup: it must be >= 0"):
        optim.cosine_with_warmup(-1, 10, 100, 1.0, 0.0)
    with pytest.raises(ValueError, match="ScheduledOptim: n_warmup_steps must be > 0"):
        optim.ScheduledOptim(opt, 2.0, 512, 0)
    with pytest.raises(TypeError, match="ScheduledOptim: optimizer must be"):
        optim.ScheduledOptim(torch.optim.Adam(theirs), 2.0, 512, 4000)
    sched = optim.StepLR(opt, 3)
    with pytest.raises(ValueError, match="missing key 'last_epoch'"):
        sched.load_state_dict({"base_lrs": [0.1]})
    with pytest.raises(ValueError, match="1 parameter groups"):
        sched.load_state_dict({"last_epoch": 3, "_step_count": 4, "base_lrs": [0.1, 0.2], "_last_lr": [0.1, 0.2]})
