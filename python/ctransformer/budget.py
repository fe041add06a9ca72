"""How many steps a time budget buys: the plan a ``--max-minutes`` run lays its schedule over.

A schedule written in steps ends a slow machine's budget before its warmup has, and a fast machine's long
after it has annealed. So a run with a budget first measures its own step: it runs `probe_steps` real
training steps, times them, and puts the model, optimizer, schedule and random generators back as they were.
Then it counts what the budget must also pay for (the validations the plan makes, timed once), and plans

    steps = (budget - probe - validations(steps) * one validation) / one step

The run then is exactly the run ``--steps <that count>`` would be, on any machine: the budget only chooses
the count. The plan goes into the checkpoint, so a resumed run keeps it.
"""
import os
import tempfile
import time

import numpy as np

import ctransformer as ct
from ctransformer.checkpoint import load_checkpoint, save_checkpoint


def _probe(task, model, optimizer, scheduler, rng, train_step, probe_steps):
    """Seconds per training step, the median of `probe_steps` steps after a first one (its allocations
    and caches are not a step's cost); everything the steps changed is put back."""
    folder = tempfile.mkdtemp(prefix="ctransformer-probe-")
    path = os.path.join(folder, "before.safetensors")
    save_checkpoint(path, model, optimizer, scheduler)
    numpy_state, ct_state = rng.bit_generator.state, ct.get_rng_state()
    seconds = []
    try:
        model.train()
        with ct.autocast(enabled=task.cfg.get("precision") == "bfloat16"):
            for step in range(probe_steps + 1):
                began = time.perf_counter()
                train_step(task, model, optimizer, scheduler, rng, step)
                seconds.append(time.perf_counter() - began)
        load_checkpoint(path, model, optimizer, scheduler)
    finally:
        os.remove(path)
        os.rmdir(folder)
    rng.bit_generator.state = numpy_state
    ct.set_rng_state(ct_state)
    return float(np.median(seconds[1:]))


def plan_steps(minutes, step_seconds, validation_seconds, validations, spent_seconds=0.0):
    """The most steps s with spent + s * step_seconds + len(validations(s)) * validation_seconds <= the
    budget (at least 1). `validations(s)`: the steps a run of s steps validates after."""
    budget = 60.0 * minutes - spent_seconds

    def fits(steps):
        return steps * step_seconds + len(validations(steps)) * validation_seconds <= budget

    low, high = 1, max(1, int(budget / step_seconds))     # the answer is in [low, high]; the cost grows with steps
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return low


def plan(task, model, optimizer, scheduler, rng, train_step, minutes, probe_steps=8, agree=None, spent_seconds=0.0):
    """{"steps", "minutes", "step_seconds", "validation_seconds", "validations", "probe_seconds"} for a run of
    `task` with a budget of `minutes`, of which `spent_seconds` are gone already (an earlier plan's probe).
    `agree(value)`: rank 0's value on every process (MPI), so that every process plans the same count; None on
    one process."""
    began = time.perf_counter() - spent_seconds
    step_seconds = _probe(task, model, optimizer, scheduler, rng, train_step, probe_steps)
    validation_seconds = task.validation_seconds(model)
    if hasattr(task, "restart_clocks"):
        task.restart_clocks()
    spent = time.perf_counter() - began
    steps = plan_steps(minutes, step_seconds, validation_seconds, task.validation_steps, spent)
    if agree is not None:
        steps = agree(steps)
    return {"steps": steps, "minutes": minutes, "step_seconds": round(step_seconds, 4),
            "validation_seconds": round(validation_seconds, 2), "validations": len(task.validation_steps(steps)),
            "probe_seconds": round(spent, 2)}
