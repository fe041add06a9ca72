"""Scripted training of the tasks: ``python -m ctransformer.train TASK [options]``.

Tasks (``--list`` shows their defaults):
  copy           the Annotated Transformer's copy task on the post-norm Transformer
  toy-translate  a toy translation task on the small pre-norm model
  shakespeare    the GPT on Tiny Shakespeare characters, nanoGPT's CPU settings
  multi30k       Multi30k German->English (or any parallel corpus: --set train_src=FILE ...) with
                 subwords, token batches, validation BLEU; translate with ctransformer-translate

Every run is reproducible from ``--seed``. ``--checkpoint PATH`` saves model, optimizer, schedule,
step, history and both random generators' states (every ``--checkpoint-every`` steps and at the end);
``--resume`` continues from it exactly as if the run had never stopped.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

import ctransformer as ct
from ctransformer import budget, precision
from ctransformer.checkpoint import CheckpointError, load_checkpoint, read_checkpoint_contents, save_checkpoint
from ctransformer.data.parallel_corpus import CorpusError
from ctransformer.kept_models import KeptModels
from ctransformer.tasks import TASKS, Run


def _format(metrics):
    parts = []
    for key, value in metrics.items():
        if key == "step":
            continue
        parts.append(f"{key} {value:.3g}" if key == "lr" else
                     f"{key} {value:.4f}" if isinstance(value, float) else f"{key} {value}")
    return "  ".join(parts)


def train_step(task, model, optimizer, scheduler, rng, step):
    """One optimizer step of `task` on its global batch for `step`; returns the metrics to log.

    With --distributed each process runs its rows of the global batch (task.run.shard), and backwards
    its loss scaled so that averaging gradients over processes gives the global batch's mean; the
    logged loss and metrics are the global batch's means. The returned "tokens" (the items the loss
    averaged over, in the global batch) feed the progress bar's rate and are not logged."""
    shard = task.run.shard
    batch = task.train_batch(step, rng)
    global_count = task.loss_count(batch)
    # precision bf16: the whole step in an autocast region, so each weight is rounded to bf16 once (and
    # Adam rewrites the copies as it updates the weights; train() holds a region across steps)
    with ct.autocast(enabled=task.cfg.get("precision") == "bfloat16"):
        with shard.split(*batch) as local:
            local = local if len(batch) > 1 else (local,)
            loss, metrics = task.loss(model, local)
            local_count = task.loss_count(local)
        metrics = {"loss": loss.item(), **metrics}
        metrics = {key: shard.global_mean(value, local_count, global_count) for key, value in metrics.items()}
        optimizer.zero_grad()
        shard.scale_loss(loss, local_count, global_count).backward()
        if task.cfg.get("grad_clip", 0) > 0:
            ct.optim.clip_grad_norm_(model.parameters(), task.cfg["grad_clip"])
        metrics["lr"] = optimizer.param_groups[0]["lr"]
        optimizer.step()
    if scheduler is not None and task.scheduler_due(step):
        scheduler.step()
    return {**metrics, "tokens": global_count}


def _build(task):
    """(model, optimizer, scheduler, numpy rng) of the task's configuration, from the run's seed."""
    ct.manual_seed(task.cfg["seed"])
    rng = np.random.default_rng(task.cfg["seed"])
    return (*task.build(), rng)


def _plan_budget(task, built, minutes, agree, began, log):
    """(plan, built) for a run of `minutes` (ctransformer.budget), logged; `built` is _build's tuple. A task with
    a recipe for short runs (short_run_config: multi30k) whose first plan is short is built again from the seed
    with that recipe and planned again; the plan names the settings it changed ("config"), the time the first
    plan took counting against the budget."""
    def planned(built, spent):
        model, optimizer, scheduler, rng = built
        plan = budget.plan(task, model, optimizer, scheduler, rng, train_step, minutes, agree=agree,
                           spent_seconds=spent)
        tokens = f" of {task.cfg['batch_tokens']} tokens" if "batch_tokens" in task.cfg else ""
        log(f"time budget of {minutes:g} min: a step takes {plan['step_seconds']:.3f} s and a validation "
            f"~{plan['validation_seconds']:.1f} s ({plan['validations']} of them), measured in "
            f"{plan['probe_seconds']:.1f} s; planned {plan['steps']} steps{tokens}")
        return plan

    plan = planned(built, 0.0)
    changes = task.short_run_config(plan["steps"]) if hasattr(task, "short_run_config") else {}
    if changes:
        settings = ", ".join(f"{key}={value}" for key, value in changes.items())
        log(f"{plan['steps']} steps of {task.cfg['batch_tokens']} tokens is a short run (under short_run_tokens = "
            f"{task.cfg['short_run_tokens']}): it trains with the short-run recipe, {settings}, planned again")
        first = {"steps": plan["steps"], **{key: task.cfg[key] for key in changes}}
        task.cfg.update(changes)
        built = _build(task)
        plan = {**planned(built, time.perf_counter() - began), "config": changes, "first_plan": first}
    return plan, built


def train(task_name, config=None, checkpoint=None, resume=False, checkpoint_every=None, progress=True,
          log=print, max_steps=None, max_minutes=None, distributed=False, bucket_cap_mb=1.0):
    """Train `task_name` with `config` (overrides of its defaults); returns (task, model, result).

    `max_steps` stops early without changing the schedule (used to test resuming); `result` holds
    the history of logged metrics, the final evaluation and the wall time. With a checkpoint, the loop
    keeps the best and the last validated models beside it by the task's best_metric
    (ctransformer.kept_models; result["best"]), and evaluates their average at the end too.
    `max_minutes` is a time budget (fairseq's --stop-time-hours). A task whose schedule fits its steps
    (``fits_budget``: multi30k's "fitted" schedule) first measures its step and plans the steps the budget buys
    (ctransformer.budget), and is then the run ``steps=<that count>`` would be; result["plan"] says how it
    counted. For every task, training ends after the first step that exceeds the budget, and the run is then
    saved and evaluated as if `steps` had been that step.

    `distributed` trains on every process of an MPI job (mpirun -np N): the same global batches,
    each process running its rows, gradients averaged during backward (ctransformer.distributed).
    Rank 0 alone logs, validates, writes checkpoints and evaluates; every rank reads the checkpoint
    on --resume (a shared filesystem, as for any multi-machine job).
    """
    if max_minutes is not None and not max_minutes > 0:
        raise ValueError(f"train: max_minutes must be a positive number of minutes, got {max_minutes!r}")
    rank0, ddp = True, None
    if distributed:
        from ctransformer import distributed as dist

        rank, world = dist.init_process_group()
        rank0 = rank == 0
        if not rank0:
            log, progress = (lambda message: None), False
    run = Run(checkpoint=checkpoint, resume=resume, log=log)
    if distributed:
        run.shard = dist.Shard(rank, world)
    try:
        task = TASKS[task_name](config, run)
    except ValueError as error:
        raise ValueError(f"train: {error}") from None
    cfg = task.cfg
    built = _build(task)
    if resume and (not checkpoint or not os.path.exists(checkpoint)):
        raise FileNotFoundError(f"train: --resume needs an existing --checkpoint file, got {checkpoint!r}")
    # A task whose schedule fits the run's steps (fits_budget) lays it over the steps a time budget buys,
    # measured now (ctransformer.budget); a resumed run keeps the plan its checkpoint stored.
    plan, began = None, time.perf_counter()
    fits_budget = getattr(task, "fits_budget", False)
    if fits_budget and resume:
        plan = read_checkpoint_contents(checkpoint)["extra"].get("plan")
        if plan and plan.get("config"):          # the short-run recipe the plan chose
            cfg.update(plan["config"])
            built = _build(task)
    elif fits_budget and max_minutes is not None:
        agree = (lambda steps: int(dist.broadcast_bytes(str(steps).encode()))) if distributed else None
        plan, built = _plan_budget(task, built, max_minutes, agree, began, log)
    model, optimizer, scheduler, rng = built
    if fits_budget:
        if plan is not None:
            cfg["steps"] = plan["steps"]
            scheduler = task.schedule(optimizer)
        if hasattr(task, "describe_schedule"):
            log(task.describe_schedule())
    # The best and last validated models, kept beside the checkpoint by rank 0.
    kept = KeptModels(checkpoint, task.best_metric(), cfg.get("average_last", 0), cfg, task.model_extra()) \
        if checkpoint and rank0 else None
    history, start = [], 0
    if resume:
        info = load_checkpoint(checkpoint, model, optimizer, scheduler, config=cfg)
        start, history = info["step"], list(info["extra"]["history"])
        rng.bit_generator.state = info["extra"]["numpy_rng"]
        ct.set_rng_state(info["extra"]["ct_rng"])
        task.restore_extra(info["extra"])
        if kept:
            kept.restore(info["extra"])
        log(f"resumed {task_name} from {checkpoint} at step {start}")
    if distributed:
        ddp = dist.DistributedDataParallel(model, bucket_cap_mb)   # rank 0's weights everywhere, then hooks
        log(f"distributed: {world} processes, {ddp.communication_stats()['bytes'] / 2**20:.2f} MiB of gradients "
            f"in {ddp.communication_stats()['buckets']} buckets a step")

    def save(step):
        if not rank0:
            return
        extra = {**task.checkpoint_extra(), **(kept.state() if kept else {}), "history": history,
                 "numpy_rng": rng.bit_generator.state, "ct_rng": ct.get_rng_state(),
                 **({"plan": plan} if plan is not None else {})}
        save_checkpoint(checkpoint, model, optimizer, scheduler, step=step, config=cfg, extra=extra)

    total = cfg["steps"]
    stop = total if max_steps is None else min(total, max_steps)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=total, initial=start, desc=task_name, unit="step", dynamic_ncols=True,
                   disable=not sys.stderr.isatty() and os.environ.get("CTRANSFORMER_PROGRESS") != "1")
    loop_began = time.perf_counter()   # throughput from here; the budget from before the plan's probe
    tokens = 0
    model.train()
    # precision bf16: one autocast region around the loop, so the parameters' bf16 copies live from step to
    # step (Adam keeps them current); validation inside it runs in float32
    with ct.autocast(enabled=cfg.get("precision") == "bfloat16"):
        for step in range(start, stop):
            metrics = train_step(task, model, optimizer, scheduler, rng, step)
            tokens += metrics.pop("tokens")
            if bar:
                bar.set_postfix_str(f"{tokens / (time.perf_counter() - loop_began):.0f} tok/s", refresh=False)
            # The time budget is agreed on by every process each step (a collective), before logging: the step
            # that ends a run is logged and evaluated as its last one (final=True), so the model a run ends
            # with is always validated, and a task choosing a best checkpoint sees it.
            time_up = max_minutes is not None and _agreed(time.perf_counter() - began >= 60 * max_minutes, distributed) \
                and step + 1 < stop
            final = step + 1 == total or time_up
            if rank0 and ((step + 1) % cfg["log_every"] == 0 or step == 0 or final or task.log_due(step + 1)):
                with ct.autocast(enabled=False):
                    evaluation = task.periodic_eval(model, rng, step + 1, final=final)
                metrics = {"step": step + 1, **metrics, **evaluation}
                history.append(metrics)
                if kept:
                    kept.offer(model, step + 1, metrics)
                message = f"step {step + 1:5d}/{total}  {_format(metrics)}"
                (bar.write if bar else log)(message)
            if bar:
                bar.update(1)
            if checkpoint and checkpoint_every and (step + 1) % checkpoint_every == 0:
                save(step + 1)
            if time_up:
                log(f"time budget of {max_minutes:g} min reached after step {step + 1}")
                stop = step + 1
                break
    if bar:
        bar.close()
    elapsed = time.perf_counter() - loop_began
    if checkpoint:
        save(stop)
    result = {"history": history, "train_seconds": elapsed, "steps": stop, **({"plan": plan} if plan else {})}
    if ddp is not None:
        stats = ddp.communication_stats()
        result["communication"] = {"processes": world, "buckets": stats["buckets"], "bytes_per_step": stats["bytes"],
                                   "wait_seconds": stats["wait_seconds"], "steps": stats["steps"]}
    if max_minutes is not None and stop < total:
        result["stopped_by"] = f"time budget of {max_minutes:g} min"
    if rank0 and (stop == total or "stopped_by" in result):
        model.eval()
        with ct.no_grad():
            result["evaluation"] = task.evaluate(model, np.random.default_rng(cfg["seed"] + 1))
            result["samples"] = task.samples(model, np.random.default_rng(cfg["seed"] + 2))
            averaged, count = kept.average() if kept else (None, 0)
            if averaged:    # the mean of the last validated models, evaluated as the model itself was
                weights = model.state_dict()
                load_checkpoint(averaged, model)
                evaluation = task.evaluate(model, np.random.default_rng(cfg["seed"] + 1))
                model.load_state_dict(weights)
                result["evaluation"].update({f"averaged_{k}": v for k, v in evaluation.items()},
                                            averaged_checkpoints=count)
    if kept:
        result["best"] = kept.best
    return task, model, result


def _stop_job(args, message):
    """In an MPI job, one process's error stops all of them at once (the others would wait for it in
    the next all-reduce forever), with a message naming the rank."""
    if not args.distributed:
        return
    from ctransformer import distributed as dist

    if dist.is_initialized() and dist.get_world_size() > 1:
        import traceback

        traceback.print_exc()
        dist.abort(f"ctransformer-train: error: {message}")


def _agreed(flag, distributed):
    """Rank 0's `flag` on every process (a decision all must take at the same step, such as a time
    budget running out: each process's own clock could disagree by a step)."""
    if not distributed:
        return flag
    from ctransformer import distributed as dist

    return dist.broadcast_bytes(b"1" if flag else b"0") == b"1"


def _parse_value(text, default):
    if isinstance(default, bool):
        return text.lower() in ("1", "true", "yes", "on")
    if isinstance(default, int):
        return int(text)
    if isinstance(default, float):
        return float(text)
    if isinstance(default, (list, tuple)):
        return json.loads(text)
    return text


def main(argv=None):
    parser = argparse.ArgumentParser(prog="ctransformer-train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task", nargs="?", choices=sorted(TASKS), help="what to train")
    parser.add_argument("--list", action="store_true", help="show every task's defaults and exit")
    parser.add_argument("--seed", type=int, help="seed of data, initialisation and dropout")
    parser.add_argument("--steps", type=int, help="optimizer steps (overrides --epochs)")
    parser.add_argument("--epochs", type=int, help="epochs, for tasks that count them")
    parser.add_argument("--checkpoint", help="safetensors file to save to (and resume from)")
    parser.add_argument("--checkpoint-every", type=int, default=None, help="save every N steps too")
    parser.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    parser.add_argument("--threads", type=int, default=None, help="BLAS threads (default: all cores)")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="time budget: multi30k measures its step and lays its schedule over the steps the budget "
                             "buys; every task stops after the first step past it, saves and evaluates")
    parser.add_argument("--distributed", action="store_true",
                        help="train on every process of an MPI job (mpirun -np N ctransformer-train TASK --distributed): "
                             "the same global batches, split over the processes, gradients averaged during backward")
    parser.add_argument("--bucket-mb", type=float, default=1.0,
                        help="with --distributed: MiB of gradients per all-reduce bucket (default 1)")
    parser.add_argument("--precision", choices=[*precision.TRAINING, *precision.ALIASES], default=None,
                        help="bfloat16: train under ct.autocast (bf16 products, fp32 weights); the same as --set "
                             "precision=bfloat16. fp32 and bf16 are aliases")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--set", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                        help="override any default shown by --list, e.g. --set lr=1e-3 (several: --set a=1 b=2, "
                             "or --set a=1 --set b=2)")
    parser.add_argument("--json", help="write the result (history, evaluation, samples, time) here")
    parser.add_argument("--init-from", metavar="PATH",
                        help="start from a pretrained Hugging Face Marian directory (an opus-mt model; multi30k; "
                             "--set train_src=... train_tgt=... for your own corpus)")
    parser.add_argument("--save-pretrained", metavar="DIR",
                        help="write the trained model as a Hugging Face Marian directory (with --init-from)")
    args = parser.parse_args(argv)
    if args.list:
        for name, cls in sorted(TASKS.items()):
            print(f"{name}: {cls.__doc__.strip().splitlines()[0]}")
            for key, value in cls.defaults.items():
                print(f"    {key} = {value!r}")
        return 0
    for item in args.set:
        if "=" not in item:
            parser.error(f"--set takes KEY=VALUE items, got {item!r} (name the task before --set)")
    if not args.task:
        parser.error("a task is required (or --list)")
    if args.distributed:
        from ctransformer import distributed as dist

        if not dist.is_available():
            parser.exit(2, "ctransformer-train: error: --distributed needs MPI, and this build of ctransformer has "
                           "none: install MPI (Debian: apt-get install openmpi-bin libopenmpi-dev) and reinstall "
                           "(pip install .)\n")
        if not args.threads:    # the cores shared by this machine's processes, not each taking all of them
            ct.set_num_threads(max(1, (os.cpu_count() or 1) // dist.local_world_size()))
    if args.threads:
        ct.set_num_threads(args.threads)
    defaults = TASKS[args.task].defaults
    config = {}
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in defaults:
            parser.error(f"--set {key}: not an option of {args.task} (see --list)")
        config[key] = _parse_value(value, defaults[key])
    if args.seed is not None:
        config["seed"] = args.seed
    if args.precision is not None:
        config["precision"] = args.precision
    if args.epochs is not None:
        if "epochs" in defaults:        # the task turns epochs into steps once it has its batches
            if args.steps is None:
                config["epochs"] = args.epochs
        elif "steps_per_epoch" in defaults:
            config["steps"] = args.epochs * defaults["steps_per_epoch"]
        else:
            parser.error(f"--epochs: task {args.task} counts steps, not epochs")
    if args.steps is not None:
        config["steps"] = args.steps
    for flag, key, value in (("--init-from", "init_from", args.init_from),
                             ("--save-pretrained", "save_pretrained", args.save_pretrained)):
        if value:
            if key not in defaults:
                parser.error(f"{flag}: task {args.task} does not start from or save pretrained models (multi30k does)")
            config[key] = value
    if config.get("save_pretrained") and not config.get("init_from"):
        parser.error("--save-pretrained writes a Marian model: start it with --init-from")
    try:
        task, model, result = train(args.task, config, checkpoint=args.checkpoint, resume=args.resume,
                                    checkpoint_every=args.checkpoint_every, progress=not args.no_progress,
                                    max_minutes=args.max_minutes, distributed=args.distributed,
                                    bucket_cap_mb=args.bucket_mb)
    except (OSError, CorpusError, CheckpointError) as error:   # a missing or unreadable file: say which
        _stop_job(args, f"{error}")
        parser.exit(2, f"ctransformer-train: error: {error}\n")
    except BaseException as error:
        _stop_job(args, f"{type(error).__name__}: {error}")
        raise
    if args.distributed and dist.get_rank() != 0:
        return 0
    print(f"trained {result['steps']} steps in {result['train_seconds']:.1f} s"
          + (f" (stopped by the {result['stopped_by']})" if "stopped_by" in result else ""))
    evaluation = result.get("evaluation", {})
    if evaluation:
        print("evaluation: " + _format(evaluation))
    for sample in result.get("samples", []):
        print(sample)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1, default=float)
    if config.get("save_pretrained"):
        print(f"wrote {task.save_pretrained(model)}: the trained model as a Hugging Face Marian directory")
    ok, message = task.check(evaluation) if evaluation else (True, "")
    if message:
        print(message)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
