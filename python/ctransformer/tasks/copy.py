"""The Annotated Transformer's copy task on the post-norm Transformer (jadore801120's model)."""
import numpy as np

import ctransformer as ct
from ctransformer.data import copy_batch
from ctransformer.annotated import Batch, LabelSmoothing, SimpleLossCompute

from .base import Task


class Copy(Task):
    """Copy task (vocab 11, length 10, first token 1); target: greedy decoding of 1..10 returns it."""

    name = "copy"

    defaults = {
        "seed": 0, "steps": 600, "steps_per_epoch": 20, "log_every": 100,
        "vocab": 11, "length": 10, "batch_size": 80, "start_symbol": 1, "pad": 0,
        "d_model": 128, "d_inner": 512, "n_layers": 2, "n_head": 4, "dropout": 0.1,
        "lr": 0.5, "factor": 1.0, "warmup": 400, "smoothing": 0.0, "eval_batches": 5,
        "precision": "float32",   # or "bfloat16" ("bf16"): train steps under ct.autocast (the loop reads it)
    }

    def build(self):
        cfg = self.cfg
        d_head = cfg["d_model"] // cfg["n_head"]
        model = ct.nn.Transformer(cfg["vocab"], cfg["vocab"], cfg["pad"], cfg["pad"], d_word_vec=cfg["d_model"],
                                  d_model=cfg["d_model"], d_inner=cfg["d_inner"], n_layers=cfg["n_layers"],
                                  n_head=cfg["n_head"], d_k=d_head, d_v=d_head, dropout=cfg["dropout"])
        # The Annotated Transformer: Adam(lr, betas (0.9, 0.98), eps 1e-9) driven by
        # LambdaLR(rate(step, d_model, factor, warmup)).
        optimizer = ct.optim.Adam(model.parameters(), lr=cfg["lr"], betas=(0.9, 0.98), eps=1e-9)
        scheduler = ct.optim.LambdaLR(optimizer, ct.optim.NoamLambda(cfg["d_model"], cfg["factor"], cfg["warmup"]))
        self.criterion = LabelSmoothing(cfg["vocab"], cfg["pad"], cfg["smoothing"])
        return model, optimizer, scheduler

    def train_batch(self, step, rng):
        cfg = self.cfg
        return copy_batch(rng, cfg["batch_size"], cfg["length"], cfg["vocab"], cfg["start_symbol"])

    def loss_count(self, batch):
        src, tgt = batch
        return Batch(src, tgt, self.cfg["pad"]).ntokens

    def loss(self, model, batch):
        """The Annotated Transformer's SimpleLossCompute: label-smoothed KL over the target tokens, their mean."""
        batch = Batch(*batch, self.cfg["pad"])
        logits = model(batch.src, batch.tgt)
        compute = SimpleLossCompute(lambda x: ct.functional.log_softmax(x, -1), self.criterion)
        _, loss = compute(logits, batch.tgt_y, batch.ntokens)
        target = batch.tgt_y.reshape(-1)
        keep = target != self.cfg["pad"]      # the copy task has no padding: every position counts
        accuracy = float((logits.numpy().argmax(-1)[keep] == target[keep]).mean())
        return loss, {"accuracy": accuracy}

    def decode(self, model, src):
        cfg = self.cfg
        src_mask = ct.nn.get_pad_mask(src, cfg["pad"])
        return ct.decode.greedy_decode(model, src, src_mask, max_len=cfg["length"], start_symbol=cfg["start_symbol"])

    def evaluate(self, model, rng):
        cfg = self.cfg
        exact = []
        for _ in range(cfg["eval_batches"]):
            src, _ = copy_batch(rng, cfg["batch_size"], cfg["length"], cfg["vocab"], cfg["start_symbol"])
            exact.append((self.decode(model, src) == src).all(axis=1))
        counting = np.arange(1, cfg["length"] + 1, dtype=np.int64)[None]
        return {"exact_match": float(np.concatenate(exact).mean()),
                "copies_1_to_10": bool((self.decode(model, counting) == counting).all())}

    def samples(self, model, rng):
        counting = np.arange(1, self.cfg["length"] + 1, dtype=np.int64)[None]
        out = self.decode(model, counting)
        return [f"source  {' '.join(map(str, counting[0]))}", f"decoded {' '.join(map(str, out[0]))}"]

    def check(self, evaluation):
        ok = evaluation["copies_1_to_10"]
        return ok, "greedy decoding of 1..10 " + ("returns it" if ok else "does NOT return it")
