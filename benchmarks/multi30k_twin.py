"""The multi30k recipe twice: ctransformer and its PyTorch twin, same weights, batches and schedule.

    python benchmarks/multi30k_twin.py --steps 300 [--set KEY=VALUE ...] [--out DIR]

ctransformer trains with the multi30k task's own step (``tasks/multi30k.py``); PyTorch trains the
post-norm reference (tests/reference/post_norm.py) from the same initial weights (copied from
ctransformer's, tied the same way) on the same token batches, with torch.optim.Adam(0.9, 0.98, 1e-9) at
the task's rate (fitted or Noam), the same gradient clipping and
``cross_entropy(label_smoothing=0.1, ignore_index=pad)``. Dropout is on in both, so the curves differ by
their dropout masks only (tests/training/test_multi30k.py checks a step with dropout off is equal).

The two take turns step by step, so the machine's other load hits both alike. Prints the loss of
both every --log-every steps, the median step time of each and the time of an epoch (the median step
times the batches of an epoch); writes both loss curves on one chart (PNG) and the numbers (JSON) to
--out.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

# As benchmarks/run.py: torch's OpenMP threads sleep when idle rather than spin (it reads this at start).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import measure  # noqa: E402

THREADS = 2


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="multi30k task options")
    p.add_argument("--out", default=os.path.join(HERE, "results", "multi30k_twin"))
    a = p.parse_args()

    import torch
    import ctransformer as ct
    from ctransformer.data.subword import PAD_ID
    from ctransformer.tasks.multi30k import Multi30k
    from ctransformer.tasks import Run
    from ctransformer.train import _parse_value, train_step
    from reference import post_norm as post_ref
    from reference.parity import ct_to_torch

    torch.set_num_threads(THREADS)
    ct.set_num_threads(THREADS)
    cfg = dict(Multi30k.defaults, steps=a.steps)
    for item in a.set:
        key, _, value = item.partition("=")
        if key not in cfg:
            p.error(f"--set {key}: not an option of the multi30k task")
        cfg[key] = _parse_value(value, cfg[key])
    task = Multi30k(cfg, Run())
    cfg = task.cfg
    ct.manual_seed(cfg["seed"])
    model, optimizer, scheduler = task.build()
    model.train()
    n, d, h = len(task.vocab), cfg["d_model"], cfg["n_head"]
    ref = post_ref.Transformer(n, n, PAD_ID, PAD_ID, d_word_vec=d, d_model=d, d_inner=cfg["d_inner"],
                               n_layers=cfg["n_layers"], n_head=h, d_k=d // h, d_v=d // h, dropout=cfg["dropout"],
                               n_position=cfg["n_position"], scale_emb_or_prj=cfg["scale_emb_or_prj"])
    ct_to_torch(model, ref)
    ref.train()
    torch_opt = torch.optim.Adam(ref.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    torch_sched = torch.optim.lr_scheduler.LambdaLR(torch_opt, task.learning_rate)   # the task's schedule, either kind

    def torch_step(step):
        src, tgt = task.batcher.arrays(task.batcher.at_step(step)[2])
        logits = ref(torch.from_numpy(src), torch.from_numpy(tgt[:, :-1]))
        loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(tgt[:, 1:].reshape(-1)),
                                                 ignore_index=PAD_ID, label_smoothing=cfg["label_smoothing"])
        torch_opt.zero_grad()
        loss.backward()
        if cfg["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(ref.parameters(), cfg["grad_clip"])
        torch_opt.step()
        torch_sched.step()
        return loss.item()

    history = []
    for step in range(a.steps):
        t0 = time.perf_counter()
        ct_loss = train_step(task, model, optimizer, scheduler, None, step)["loss"]
        t1 = time.perf_counter()
        torch_loss = torch_step(step)
        t2 = time.perf_counter()
        history.append({"step": step + 1, "ct_loss": ct_loss, "torch_loss": torch_loss, "ct_s": t1 - t0,
                        "torch_s": t2 - t1})
        if (step + 1) % a.log_every == 0 or step == 0:
            print(f"step {step + 1:5d}  loss ct {ct_loss:.4f}  torch {torch_loss:.4f}  "
                  f"step ct {t1 - t0:.2f} s  torch {t2 - t1:.2f} s", flush=True)

    ct_step = statistics.median(r["ct_s"] for r in history)
    torch_step_s = statistics.median(r["torch_s"] for r in history)
    epoch = len(task.batcher)
    summary = {"steps": a.steps, "batches_per_epoch": epoch, "ct_step_s": ct_step, "torch_step_s": torch_step_s,
               "ct_epoch_s": ct_step * epoch, "torch_epoch_s": torch_step_s * epoch,
               "torch_over_ct": torch_step_s / ct_step, "cpu": measure.cpu_model(), "threads": THREADS,
               "torch": torch.__version__, "build": ct.build_info(), "loadavg_1min": os.getloadavg()[0],
               "config": {k: cfg[k] for k in ("d_model", "d_inner", "n_layers", "n_head", "vocab_size",
                                              "batch_tokens", "dropout", "schedule", "lr", "warmup_fraction",
                                              "final_lr_fraction", "warmup", "lr_factor", "scale_emb_or_prj")}}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "twin.json"), "w") as f:
        json.dump({"summary": summary, "history": history}, f, indent=1)
    print(f"\nmedian step: ctransformer {ct_step:.2f} s, PyTorch {torch_step_s:.2f} s "
          f"(torch/ct {summary['torch_over_ct']:.2f}x); an epoch of {epoch} batches: "
          f"ctransformer {ct_step * epoch / 60:.1f} min, PyTorch {torch_step_s * epoch / 60:.1f} min "
          f"({summary['cpu']}, {THREADS} threads each, load {summary['loadavg_1min']:.1f})")

    try:
        import altair as alt
        import pandas as pd
        rows = [{"step": r["step"], "loss": r[f"{side}_loss"], "library": name}
                for r in history for side, name in (("ct", "ctransformer"), ("torch", "PyTorch 2.13"))]
        chart = alt.Chart(pd.DataFrame(rows)).mark_line().encode(
            x="step:Q", y=alt.Y("loss:Q", title="training loss (label-smoothed)", scale=alt.Scale(zero=False)),
            color="library:N",
            strokeDash="library:N").properties(width=420, height=260,
                                               title="Multi30k de→en, same weights, batches and schedule")
        from ctransformer.plots import save_png
        save_png(chart, os.path.join(a.out, "twin_loss.png"))
        print(f"chart: {os.path.join(a.out, 'twin_loss.png')}")
    except ImportError as error:
        print(f"no chart ({error}); the numbers are in twin.json")


if __name__ == "__main__":
    main()
