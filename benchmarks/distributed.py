#!/usr/bin/env python
"""Data-parallel training measured here, and what it predicts for a cluster.

    python benchmarks/distributed.py [--tasks multi30k,shakespeare] [--steps 30] [--out FILE.md]

1. On this machine, the same training steps (the task's global batch, default recipe) as
   - 1 process x 2 threads,
   - 2 processes x 1 thread (mpirun -np 2 ... --distributed; gradients all-reduced in buckets
     overlapped with backward),
   - 1 process x 1 thread (the compute of one process, for the model below);
   each a median step time over --steps steps after 3 warm-up steps, and for 2 processes the share
   of each step spent waiting for communication at the end of backward (the reducer's own clock).
2. For clusters: expected step time and scaling efficiency for 2-64 ranks on 10, 25 and 100 Gb/s
   with ring all-reduce, from the measured compute time per step and gradient bytes (see `cluster`
   for the model and its assumptions), and the model size from which overlap hides the
   communication.

The worker mode (--worker) is what runs under mpirun; it prints one JSON line on rank 0.
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Per-task overrides: none, so each task runs its default recipe (batch, model) as ctransformer-train does.
OVERRIDES = {"multi30k": {}, "shakespeare": {}}


def worker(args):
    import numpy as np

    import ctransformer as ct
    from ctransformer import distributed as dist
    from ctransformer.tasks import TASKS, Run
    from ctransformer.train import train_step

    ct.set_num_threads(args.threads)
    run = Run(log=lambda message: None)
    ddp = None
    if args.distributed:
        rank, world = dist.init_process_group()
        run.shard = dist.Shard(rank, world)
    task = TASKS[args.task](OVERRIDES.get(args.task, {}), run)
    cfg = task.cfg
    ct.manual_seed(cfg["seed"])
    rng = np.random.default_rng(cfg["seed"])
    model, optimizer, scheduler = task.build()
    if args.distributed:
        ddp = dist.DistributedDataParallel(model, args.bucket_mb)
    model.train()
    times, waits = [], []
    for step in range(args.warmup + args.steps):
        before = ddp.communication_stats()["wait_seconds"] if ddp else 0.0
        dist.barrier()                       # every rank starts the step together (no-op on one process)
        start = time.perf_counter()
        train_step(task, model, optimizer, scheduler, rng, step)
        elapsed = time.perf_counter() - start
        if step >= args.warmup:
            times.append(elapsed)
            waits.append((ddp.communication_stats()["wait_seconds"] - before) if ddp else 0.0)
    if dist.get_rank() == 0:
        stats = ddp.communication_stats() if ddp else {"bytes": 0, "buckets": 0, "bucket_bytes": [0]}
        print(json.dumps({"task": args.task, "threads": args.threads, "processes": dist.get_world_size(),
                          "step_s": statistics.median(times), "wait_s": statistics.median(waits),
                          "grad_bytes": stats["bytes"], "buckets": stats["buckets"],
                          "last_bucket_bytes": stats["bucket_bytes"][-1],
                          "params": stats["bytes"] // 4}))    # distinct parameters (tied ones once)


def run_config(task, processes, threads, args):
    command = [sys.executable, os.path.abspath(__file__), "--worker", "--task", task, "--threads", str(threads),
               "--steps", str(args.steps), "--warmup", str(args.warmup), "--bucket-mb", str(args.bucket_mb)]
    env = {**os.environ, "CTRANSFORMER_PROGRESS": "0", "OMP_NUM_THREADS": str(threads)}
    if processes > 1:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        command = [shutil.which("mpirun"), "-np", str(processes), "--oversubscribe", *command, "--distributed"]
    out = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"benchmark worker failed ({' '.join(command)}):\n{out.stdout}\n{out.stderr}")
    return json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][-1])


# --- the cluster model --------------------------------------------------------------------------------------
# Ring all-reduce of G bytes over N ranks sends 2 (N - 1) / N x G bytes through each link, in
# 2 (N - 1) messages per bucket: t_ar = 2 (N - 1) / N x G / BW + 2 (N - 1) x ALPHA x buckets.
# Each rank is one machine like this one (t_c = the 1 process x 2 threads step). Backward is
# BACKWARD_SHARE of a step; every bucket but the last can run under it (the last, the embedding's,
# is complete only when backward ends), so the exposed communication is
#   max(t_ar x last / G, t_ar - BACKWARD_SHARE x t_compute).
# Weak scaling: each rank keeps the task's batch (global batch N times larger), t_compute = t_c.
# Strong scaling: the task's global batch split N ways, t_compute = t_c / N (ideal compute scaling).
ALPHA = 10e-6          # seconds per message on a TCP/Ethernet link (an assumption, typical of 10-100 GbE)
BACKWARD_SHARE = 2 / 3  # backward ~ 2x forward (the usual FLOP count: 4PT of 6PT per step)
RANKS = (2, 4, 8, 16, 32, 64)
LINKS_GBPS = (10, 25, 100)


def allreduce_seconds(n, grad_bytes, buckets, gbps):
    return 2 * (n - 1) / n * grad_bytes / (gbps * 1e9 / 8) + 2 * (n - 1) * ALPHA * max(buckets, 1)


def step_seconds(t_compute, n, grad_bytes, buckets, last_bytes, gbps):
    t_ar = allreduce_seconds(n, grad_bytes, buckets, gbps)
    exposed = max(t_ar * last_bytes / grad_bytes, t_ar - BACKWARD_SHARE * t_compute)
    return t_compute + exposed, t_ar


def hiding_model_size(tokens_flops_per_param, n, gbps, bucket_bytes):
    """The smallest parameter count whose backward hides all but the last bucket's all-reduce, or
    None if no size does (compute and gradient bytes both grow with the parameters, so beyond one
    bucket the condition no longer depends on the size: it holds for all sizes or none)."""
    # Per parameter: backward time b = BACKWARD_SHARE x t_c / P; ring bandwidth time w = 8 (N-1) / (N BW);
    # latency per parameter beyond one bucket l = 2 (N-1) ALPHA x 4 / bucket_bytes.
    b = BACKWARD_SHARE * tokens_flops_per_param
    w = 2 * (n - 1) / n * 4 / (gbps * 1e9 / 8)
    latency_per_param = 2 * (n - 1) * ALPHA * 4 / bucket_bytes
    if b <= w + latency_per_param:
        return None
    return 2 * (n - 1) * ALPHA / (b - w)   # one bucket: its fixed latency must fit under the backward


def cluster_tables(measured, bucket_bytes):
    lines = []
    t_c, grad_bytes, params = measured["step_2threads"], measured["grad_bytes"], measured["params"]
    buckets = max(measured["buckets"], 1)
    last = measured["last_bucket_bytes"]
    for title, strong in (("weak scaling: every rank runs the task's batch (the global batch grows N times)", False),
                          ("strong scaling: the task's global batch split over N ranks", True)):
        lines += [f"{title}; step time and efficiency (t_1 / t_N for weak, t_1 / (N t_N) for strong):", "",
                  "| ranks | " + " | ".join(f"{g} Gb/s" for g in LINKS_GBPS) + " |",
                  "|---|" + "---|" * len(LINKS_GBPS)]
        for n in RANKS:
            cells = []
            for gbps in LINKS_GBPS:
                t_compute = t_c / n if strong else t_c
                t_step, _ = step_seconds(t_compute, n, grad_bytes, buckets, last, gbps)
                efficiency = t_c / (n * t_step) if strong else t_c / t_step
                cells.append(f"{1e3 * t_step:.0f} ms, {100 * efficiency:.0f}%")
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
        lines.append("")
    per_param = t_c / params
    lines += ["Model size from which backward hides all but the last bucket's all-reduce, at this task's "
              "batch per rank and this machine's speed per parameter (weak scaling):", "",
              "| ranks | " + " | ".join(f"{g} Gb/s" for g in LINKS_GBPS) + " |", "|---|" + "---|" * len(LINKS_GBPS)]
    for n in RANKS:
        cells = []
        for gbps in LINKS_GBPS:
            p = hiding_model_size(per_param, n, gbps, bucket_bytes)
            cells.append("never" if p is None else f"{p:,.0f} parameters")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--distributed", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--task", default="multi30k", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--tasks", default="multi30k,shakespeare", help="tasks to measure (their default recipes)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--bucket-mb", type=float, default=1.0, help="all-reduce bucket size (MiB)")
    parser.add_argument("--out", help="also write the tables (Markdown) here")
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    import ctransformer as ct

    if not (ct.distributed.is_available() and shutil.which("mpirun")):
        raise SystemExit("needs MPI in the build and mpirun (scripts/setup.sh installs Open MPI)")
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    lines = [f"Data-parallel training on this machine: {cpu}, {os.cpu_count()} logical CPUs; "
             f"{time.strftime('%Y-%m-%d %H:%M')}; median of {args.steps} steps after {args.warmup}; "
             f"buckets of {args.bucket_mb:g} MiB. Command: python benchmarks/distributed.py "
             f"--tasks {args.tasks} --steps {args.steps}", "",
             "| task | params | gradient MiB / buckets | 1 process x 2 threads | 2 processes x 1 thread | "
             "waiting on communication | 1 process x 1 thread |", "|---|---|---|---|---|---|---|"]
    measured_all = {}
    for task in args.tasks.split(","):
        one_two = run_config(task, 1, 2, args)
        two_one = run_config(task, 2, 1, args)
        one_one = run_config(task, 1, 1, args)
        measured_all[task] = {"step_2threads": one_two["step_s"], "grad_bytes": two_one["grad_bytes"],
                              "buckets": two_one["buckets"], "params": two_one["params"],
                              "last_bucket_bytes": two_one["last_bucket_bytes"]}
        lines.append(f"| {task} | {two_one['params'] / 1e6:.2f} M | {two_one['grad_bytes'] / 2**20:.1f} / "
                     f"{two_one['buckets']} | {1e3 * one_two['step_s']:.0f} ms | {1e3 * two_one['step_s']:.0f} ms "
                     f"({one_two['step_s'] / two_one['step_s']:.2f}x) | {1e3 * two_one['wait_s']:.1f} ms "
                     f"({100 * two_one['wait_s'] / two_one['step_s']:.1f}% of the step) | "
                     f"{1e3 * one_one['step_s']:.0f} ms |")
        print(lines[-1], flush=True)
    lines.append("")
    for task, measured in measured_all.items():
        lines += [f"Cluster model for {task} ({measured['params'] / 1e6:.2f} M parameters, "
                  f"{measured['grad_bytes'] / 2**20:.1f} MiB of gradients, {1e3 * measured['step_2threads']:.0f} ms "
                  f"of compute per step on one such machine; ring all-reduce, {ALPHA * 1e6:.0f} us per message, "
                  f"backward {BACKWARD_SHARE:.2f} of a step):", ""]
        lines += cluster_tables(measured, int(args.bucket_mb * 2**20))
        lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
