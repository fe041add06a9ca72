"""The Shakespeare task trained twice from the same start: ctransformer and the GPT's PyTorch reference.

Same initial weights (ctransformer's, loaded into the torch reference), the same 2000 batches, the
same AdamW groups, schedule and clipping; both are then judged on the whole validation split. It
shows whether a gap to nanoGPT's reported ~1.88 is ctransformer's or the recipe's.

    python scripts/shakespeare_torch.py [--steps 2000] [--decay seed|nanogpt]   (about 4 minutes)

--decay seed (the task's name for it) decays as the GPT reference's configure_optimizers does (Linear
weights; no biases, LayerNorms or embeddings); nanogpt decays every parameter of rank >= 2, embeddings
included.
"""
import argparse
import os
import sys
import time

import numpy as np
import torch

import ctransformer as ct
from ctransformer.tasks.shakespeare import Shakespeare
from ctransformer.train import train_step

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from reference.gpt_reference import GPT as TorchGPT  # noqa: E402


def train_ct(task):
    cfg = task.cfg
    ct.manual_seed(cfg["seed"])
    model, optimizer, scheduler = task.build()
    start = model.state_dict()
    rng = np.random.default_rng(cfg["seed"])
    t0 = time.perf_counter()
    for step in range(cfg["steps"]):
        train_step(task, model, optimizer, scheduler, rng, step)
    model.eval()
    return start, task.full_val_loss(model), time.perf_counter() - t0


def train_torch(task, start):
    cfg = task.cfg
    torch.manual_seed(cfg["seed"])
    torch.set_num_threads(ct.get_num_threads())
    model = TorchGPT(task.data.vocab_size + 1, cfg["block_size"], cfg["n_layer"], cfg["n_embd"], cfg["n_head"],
                     4 * cfg["n_embd"], cfg["dropout"])
    model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in start.items()}, strict=False)
    if cfg["decay"] == "seed":
        groups = model.configure_optimizers(cfg["weight_decay"])
    else:
        params = list(dict(model.named_parameters()).values())
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg["weight_decay"]},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]))
    rng = np.random.default_rng(cfg["seed"])
    t0 = time.perf_counter()
    for step in range(cfg["steps"]):
        for g in optimizer.param_groups:
            g["lr"] = ct.optim.cosine_with_warmup(step, cfg["warmup_iters"], cfg["lr_decay_iters"], cfg["lr"],
                                                   cfg["min_lr"])
        x, y = task.batch("train", rng)
        _, loss = model(torch.from_numpy(x), torch.from_numpy(y))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
        optimizer.step()
    model.eval()
    block = cfg["block_size"]
    val = task.data.val
    n = (len(val) - 1) // block
    x = torch.from_numpy(val[: n * block].reshape(n, block) + 1)
    y = torch.from_numpy(val[1: n * block + 1].reshape(n, block) + 1)
    with torch.no_grad():
        total = sum(model(x[i:i + 64], y[i:i + 64])[1].item() * len(x[i:i + 64]) for i in range(0, n, 64))
    return total / n, time.perf_counter() - t0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--decay", choices=["seed", "nanogpt"], default="seed")
    args = parser.parse_args()
    task = Shakespeare({"steps": args.steps, "seed": args.seed, "decay": args.decay})
    cfg = task.cfg
    start, ct_val, ct_s = train_ct(task)
    torch_val, torch_s = train_torch(task, start)
    print(f"{cfg['steps']} steps, seed {cfg['seed']}, decay {cfg['decay']}: val loss on the whole split "
          f"ctransformer {ct_val:.4f} ({ct_s:.0f} s), PyTorch {torch_val:.4f} ({torch_s:.0f} s)")


if __name__ == "__main__":
    main()
