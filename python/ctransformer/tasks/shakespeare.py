"""The GPT reference's model on Tiny Shakespeare characters, with nanoGPT's CPU settings."""
import functools

import numpy as np

import ctransformer as ct
from ctransformer.data import CharDataset
from ctransformer.nn import GPT

from .base import Task


class Shakespeare(Task):
    """GPT on Tiny Shakespeare characters (90/10 split); target: val loss <= 1.88 (nanoGPT's figure)."""

    defaults = {
        "seed": 1337, "steps": 2000, "log_every": 250, "eval_iters": 50,
        "n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 64, "batch_size": 12, "dropout": 0.0,
        "lr": 1e-3, "min_lr": 1e-4, "warmup_iters": 100, "lr_decay_iters": 2000, "beta1": 0.9, "beta2": 0.99,
        "weight_decay": 0.1, "decay": "seed", "grad_clip": 1.0, "sample_chars": 300, "temperature": 0.8, "top_k": 40,
        "target_val_loss": 1.88,
        "precision": "float32",   # or "bfloat16" ("bf16"): train steps under ct.autocast (the loop reads it)
    }

    name = "shakespeare"

    @functools.cached_property
    def data(self):
        """The characters of Tiny Shakespeare, split 90/10 (read when first used)."""
        return CharDataset()

    # The GPT reference ignores target id 0 in its loss; characters are shifted by one so id 0 is a
    # padding id that never occurs and every character counts.
    def model_extra(self):
        """The characters behind the ids, so a checkpoint serves text on its own (load_gpt_checkpoint)."""
        return {"task": self.name, "chars": "".join(self.data.chars)}

    def batch(self, split, rng):
        x, y = self.data.batch(split, self.cfg["block_size"], self.cfg["batch_size"], rng)
        return x + 1, y + 1

    def build(self):
        cfg = self.cfg
        model = GPT(self.data.vocab_size + 1, cfg["block_size"], cfg["n_layer"], cfg["n_embd"], cfg["n_head"],
                    4 * cfg["n_embd"], cfg["dropout"])
        if cfg["decay"] == "seed":    # the GPT reference: Linear weights decay; biases, LayerNorm, embeddings do not
            groups = model.configure_optimizers(cfg["weight_decay"])
        elif cfg["decay"] == "nanogpt":   # nanoGPT: every parameter of rank >= 2 decays, embeddings included
            params = model.parameters()
            groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": cfg["weight_decay"]},
                      {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
        else:
            raise ValueError(f"shakespeare: decay must be 'seed' or 'nanogpt', got {cfg['decay']!r}")
        optimizer = ct.optim.AdamW(groups, lr=cfg["lr"],
                                   betas=(cfg["beta1"], cfg["beta2"]))
        scheduler = ct.optim.CosineWarmupLR(optimizer, warmup_iters=cfg["warmup_iters"],
                                            lr_decay_iters=cfg["lr_decay_iters"], min_lr=cfg["min_lr"])
        return model, optimizer, scheduler

    def train_batch(self, step, rng):
        return self.batch("train", rng)

    def loss_count(self, batch):
        return batch[0].size

    def loss(self, model, batch):
        _, loss = model(*batch)            # the mean over rows x block_size characters
        return loss, {}

    def estimate_loss(self, model, split, rng):
        with ct.no_grad():
            return float(np.mean([model(*self.batch(split, rng))[1].item() for _ in range(self.cfg["eval_iters"])]))

    def periodic_eval(self, model, rng, step, final=False):
        # A separate generator, so evaluating does not change the training batches.
        eval_rng = np.random.default_rng(self.cfg["seed"] + step)
        model.eval()
        result = {"val_loss": self.estimate_loss(model, "val", eval_rng)}
        model.train()
        return result

    def full_val_loss(self, model, batch_size=64):
        """Mean loss over every non-overlapping block of the validation text (deterministic)."""
        block = self.cfg["block_size"]
        n = (len(self.data.val) - 1) // block
        x = self.data.val[: n * block].reshape(n, block) + 1
        y = self.data.val[1: n * block + 1].reshape(n, block) + 1
        total = 0.0
        with ct.no_grad():
            for i in range(0, n, batch_size):
                total += model(x[i:i + batch_size], y[i:i + batch_size])[1].item() * len(x[i:i + batch_size])
        return total / n

    def evaluate(self, model, rng):
        # The target is judged on the whole validation split, not on a few random batches: the
        # random-batch estimate moves by about +-0.02 from draw to draw at this size.
        return {"train_loss": self.estimate_loss(model, "train", rng), "val_loss": self.full_val_loss(model)}

    def samples(self, model, rng):
        cfg = self.cfg
        ct.manual_seed(cfg["seed"])
        start = np.array([[self.data.stoi["\n"] + 1]], dtype=np.int64)
        ids = model.generate(start, cfg["sample_chars"], temperature=cfg["temperature"], top_k=cfg["top_k"])
        return ["--- sample ---", self.data.decode(np.asarray(ids).reshape(-1)[1:] - 1)]

    def check(self, evaluation):
        target = self.cfg["target_val_loss"]
        ok = evaluation["val_loss"] <= target
        return ok, f"val loss {evaluation['val_loss']:.4f} {'<=' if ok else '>'} target {target}"


def load_gpt_checkpoint(path):
    """(model in eval mode, CharTokenizer) from a checkpoint of the shakespeare task (an int8 one quantised). A
    checkpoint written before the task stored its characters takes them from Tiny Shakespeare itself, as the task
    made them."""
    from ctransformer.checkpoint import CheckpointError, load_model_state, read_checkpoint_contents
    from ctransformer.data.shakespeare import CharTokenizer

    contents = read_checkpoint_contents(path)
    cfg = {**Shakespeare.defaults, **contents["config"]}
    if contents["extra"].get("task", Shakespeare.name) != Shakespeare.name or "word_token_embedding.weight" not in \
            contents["model"]:
        raise CheckpointError(f"{path} is not a checkpoint of the shakespeare task (a GPT); write one with "
                              f"ctransformer-train shakespeare --checkpoint PATH")
    chars = contents["extra"].get("chars") or "".join(CharDataset().chars)
    tokenizer = CharTokenizer(chars)
    model = GPT(len(tokenizer), cfg["block_size"], cfg["n_layer"], cfg["n_embd"], cfg["n_head"], 4 * cfg["n_embd"],
                cfg["dropout"])
    try:
        load_model_state(model, contents["model"], contents["int8"], contents["quantization"])
    except RuntimeError as error:
        raise CheckpointError(f"{path} does not fit the GPT its config describes: {error}") from error
    model.eval()
    return model, tokenizer
