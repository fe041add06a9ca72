"""The Annotated Transformer's copy task on system A's Transformer (seed 000's model)."""
import numpy as np

import ctransformer as ct
from ctransformer.data import copy_batch
from ctransformer.training import Batch, LabelSmoothing, SimpleLossCompute

from .base import Task


class Copy(Task):
    """Copy task (vocab 11, length 10, first token 1); target: greedy decoding of 1..10 returns it."""

    defaults = {
        "seed": 0, "steps": 600, "steps_per_epoch": 20, "log_every": 100,
        "vocab": 11, "length": 10, "batch_size": 80, "start_symbol": 1, "pad": 0,
        "d_model": 128, "d_inner": 512, "n_layers": 2, "n_head": 4, "dropout": 0.1,
        "lr": 0.5, "factor": 1.0, "warmup": 400, "smoothing": 0.0, "eval_batches": 5,
    }

    def build(self, cfg):
        d_head = cfg["d_model"] // cfg["n_head"]
        model = ct.nn.Transformer(cfg["vocab"], cfg["vocab"], cfg["pad"], cfg["pad"], d_word_vec=cfg["d_model"],
                                  d_model=cfg["d_model"], d_inner=cfg["d_inner"], n_layers=cfg["n_layers"],
                                  n_head=cfg["n_head"], d_k=d_head, d_v=d_head, dropout=cfg["dropout"])
        # Seed 002: Adam(lr, betas (0.9, 0.98), eps 1e-9) driven by LambdaLR(rate(step, d_model, factor, warmup)).
        optimizer = ct.optim.Adam(model.parameters(), lr=cfg["lr"], betas=(0.9, 0.98), eps=1e-9)
        scheduler = ct.optim.LambdaLR(optimizer, ct.optim.NoamLambda(cfg["d_model"], cfg["factor"], cfg["warmup"]))
        self.criterion = LabelSmoothing(cfg["vocab"], cfg["pad"], cfg["smoothing"])
        return model, optimizer, scheduler

    def loss(self, model, batch):
        logits = model(batch.src, batch.tgt)
        compute = SimpleLossCompute(lambda x: ct.functional.log_softmax(x, -1), self.criterion)
        return compute(logits, batch.tgt_y, batch.ntokens), logits

    def train_step(self, model, optimizer, scheduler, rng, step, cfg):
        src, tgt = copy_batch(rng, cfg["batch_size"], cfg["length"], cfg["vocab"], cfg["start_symbol"])
        global_tokens = Batch(src, tgt, cfg["pad"]).ntokens
        with self.shard.split(src, tgt) as (src, tgt):
            batch = Batch(src, tgt, cfg["pad"])
            (total, loss), logits = self.loss(model, batch)
        loss = self.shard.scale_loss(loss, batch.ntokens, global_tokens)
        optimizer.zero_grad()
        loss.backward()
        lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        scheduler.step()
        accuracy = float((logits.numpy().argmax(-1) == batch.tgt_y.reshape(-1)).mean())
        # Accuracy counts every position, padding included; the global batch has batch_size rows.
        positions = batch.tgt_y.shape[1]
        return {"loss": self.shard.global_mean(total / batch.ntokens, batch.ntokens, global_tokens),
                "accuracy": self.shard.global_mean(accuracy, batch.tgt_y.size, cfg["batch_size"] * positions),
                "lr": lr}

    def decode(self, model, src, cfg):
        src_mask = ct.nn.get_pad_mask(src, cfg["pad"])
        return ct.decode.greedy_decode(model, src, src_mask, max_len=cfg["length"], start_symbol=cfg["start_symbol"])

    def evaluate(self, model, rng, cfg):
        exact = []
        for _ in range(cfg["eval_batches"]):
            src, _ = copy_batch(rng, cfg["batch_size"], cfg["length"], cfg["vocab"], cfg["start_symbol"])
            exact.append((self.decode(model, src, cfg) == src).all(axis=1))
        counting = np.arange(1, cfg["length"] + 1, dtype=np.int64)[None]
        return {"exact_match": float(np.concatenate(exact).mean()),
                "copies_1_to_10": bool((self.decode(model, counting, cfg) == counting).all())}

    def samples(self, model, rng, cfg):
        counting = np.arange(1, cfg["length"] + 1, dtype=np.int64)[None]
        out = self.decode(model, counting, cfg)
        return [f"source  {' '.join(map(str, counting[0]))}", f"decoded {' '.join(map(str, out[0]))}"]

    def check(self, evaluation, cfg):
        ok = evaluation["copies_1_to_10"]
        return ok, "greedy decoding of 1..10 " + ("returns it" if ok else "does NOT return it")
