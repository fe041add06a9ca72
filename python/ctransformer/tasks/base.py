"""What a task provides to the training loop in ctransformer.train.

The loop (``ctransformer.train.train_step``) owns the optimizer step: it splits the global batch over
processes, backwards the loss scaled for data parallelism, clips, steps the optimizer and the
schedule. A task supplies the rest: its model and optimizer (``build``), each step's global batch
(``train_batch``), the loss on a batch (``loss``) and its evaluation.
"""
from dataclasses import dataclass, field
from typing import Callable, Optional

from ctransformer import precision as _precision
from ctransformer.distributed import Shard


# "bfloat16" ("bf16"): every training step's forward and backward run under ct.autocast (bf16 products, fp32
# master weights and everything else); evaluation and decoding stay float32. ctransformer.precision.
PRECISIONS = _precision.TRAINING


@dataclass
class Run:
    """What a task is told about the run it is part of (given to the task when it is made)."""

    checkpoint: Optional[str] = None      # the run's checkpoint path; files a task keeps go beside it
    resume: bool = False
    log: Callable[[str], None] = print    # where messages go (nowhere on ranks other than 0)
    # This process's rows of every global batch (--distributed). One process: Shard(0, 1), which
    # takes everything and changes nothing.
    shard: Shard = field(default_factory=Shard)


class Task:
    """Defaults (every option a run can set), then the pieces of one run.

    ``Task(config, run)``: `config` overrides `defaults` (an unknown key is an error); the run's whole
    configuration is then ``self.cfg``, which every method reads."""

    name = ""           # as ctransformer-train names it
    defaults = {}

    def __init__(self, config=None, run=None):
        unknown = set(config or {}) - set(self.defaults)
        if unknown:
            raise ValueError(f"unknown option(s) for task {self.name!r}: {', '.join(sorted(unknown))}")
        self.cfg = {**self.defaults, **(config or {})}
        if "precision" in self.cfg:    # one spelling in the run's config (and its checkpoints): "bf16" -> "bfloat16"
            self.cfg["precision"] = _precision.canonical(self.cfg["precision"], PRECISIONS, self.name or "task")
        self.run = run or Run()

    def log(self, message):
        self.run.log(message)

    def build(self):
        """(model, optimizer, scheduler) for this configuration; scheduler may be None."""
        raise NotImplementedError

    # --- one training step: the loop calls these -----------------------------------------------------
    def train_batch(self, step, rng):
        """The global batch of optimizer step `step`: a tuple of arrays whose rows the loop splits over
        processes (the same on every process)."""
        raise NotImplementedError

    def loss_count(self, batch):
        """How many items (tokens, characters) of `batch` the loss averages over."""
        raise NotImplementedError

    def loss(self, model, batch):
        """(loss, metrics) on `batch` (this process's rows): the loss Tensor is the mean over
        loss_count(batch) items; metrics (e.g. accuracy) are floats averaged over the same items."""
        raise NotImplementedError

    def scheduler_due(self, step):
        """Whether the schedule steps after optimizer step `step` (0-based); every step by default."""
        return True

    # --- logging, validation, checkpoints ------------------------------------------------------------
    def log_due(self, step):
        """True to log (and call periodic_eval) after `step` steps besides every log_every (e.g. at an
        epoch's end); False by default."""
        return False

    def best_metric(self):
        """(key of periodic_eval's metrics, "max" or "min") by which the loop keeps the best validated
        model beside the checkpoint (ctransformer.kept_models), or None (the default) to keep none."""
        return None

    def model_extra(self):
        """What a file holding the model alone (.best, .averaged) carries besides the weights so that it
        can be used on its own (e.g. a subword vocabulary); {} by default."""
        return {}

    def checkpoint_extra(self):
        """What this task adds to a checkpoint's extra (JSON values and NumPy arrays); model_extra() by
        default."""
        return self.model_extra()

    def restore_extra(self, extra):
        """Take back, on --resume, what checkpoint_extra stored."""

    def periodic_eval(self, model, rng, step, final=False):
        """Extra metrics at logging time (e.g. validation loss); {} by default. final: this is the run's last
        step (its natural end or its time budget), whose model must be validated."""
        return {}

    def evaluate(self, model, rng):
        """Final evaluation on fresh data (run under no_grad, in eval mode)."""
        return {}

    def samples(self, model, rng):
        """A few decoded examples to print at the end."""
        return []

    def check(self, evaluation):
        """(reached the task's target, as this run's configuration sets it?, a sentence saying so)."""
        return True, ""
