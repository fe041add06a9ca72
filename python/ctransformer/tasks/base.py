"""What a task provides to the training loop in ctransformer.train."""
from ctransformer.distributed import Shard


class Task:
    """Defaults (every option a run can set), then the pieces of one run."""

    defaults = {}

    # Set by ctransformer.train.train before build(): the run's checkpoint path (or None), whether
    # it resumes, its full config and where messages go.
    checkpoint = None
    resume = False
    cfg = None
    # This process's rows of every global batch (--distributed): train_step draws the global batch
    # (the same on every process), runs shard.split(...) of it and backwards shard.scale_loss(...).
    # One process: Shard(0, 1), which takes everything and changes nothing.
    shard = Shard()

    @staticmethod
    def log(message):
        print(message)

    def build(self, cfg):
        """(model, optimizer, scheduler) for this configuration; scheduler may be None."""
        raise NotImplementedError

    def train_step(self, model, optimizer, scheduler, rng, step, cfg):
        """One optimizer step on a fresh batch; returns the metrics to log (loss, lr, ...).

        A "tokens" entry (tokens trained on in this step) feeds the progress bar's tokens/s and is
        not logged."""
        raise NotImplementedError

    def log_due(self, step, cfg):
        """True to log (and call periodic_eval) after `step` steps besides every log_every (e.g. at an
        epoch's end); False by default."""
        return False

    def checkpoint_extra(self):
        """What this task adds to a checkpoint's extra (JSON values and NumPy arrays); {} by default."""
        return {}

    def restore_extra(self, extra):
        """Take back, on --resume, what checkpoint_extra stored."""

    def periodic_eval(self, model, rng, step, cfg, final=False):
        """Extra metrics at logging time (e.g. validation loss); {} by default. final: this is the run's last
        step (its natural end or its time budget), whose model must be validated."""
        return {}

    def evaluate(self, model, rng, cfg):
        """Final evaluation on fresh data (run under no_grad, in eval mode)."""
        return {}

    def samples(self, model, rng, cfg):
        """A few decoded examples to print at the end."""
        return []

    def check(self, evaluation, cfg):
        """(reached the task's target, as this run's cfg sets it?, a sentence saying so)."""
        return True, ""
