"""What a task provides to the training loop in ctransformer.train."""


class Task:
    """Defaults (every option a run can set), then the pieces of one run."""

    defaults = {}

    def build(self, cfg):
        """(model, optimizer, scheduler) for this configuration; scheduler may be None."""
        raise NotImplementedError

    def train_step(self, model, optimizer, scheduler, rng, step, cfg):
        """One optimizer step on a fresh batch; returns the metrics to log (loss, lr, ...)."""
        raise NotImplementedError

    def periodic_eval(self, model, rng, step, cfg):
        """Extra metrics at logging time (e.g. validation loss); {} by default."""
        return {}

    def evaluate(self, model, rng, cfg):
        """Final evaluation on fresh data (run under no_grad, in eval mode)."""
        return {}

    def samples(self, model, rng, cfg):
        """A few decoded examples to print at the end."""
        return []

    def check(self, evaluation):
        """(reached the task's target?, a sentence saying so)."""
        return True, ""
