"""The models a training run keeps beside its checkpoint, chosen by the loop from its validations.

For a checkpoint ``run.safetensors``:
- ``run.best.safetensors``: the best validated model so far, by the task's ``best_metric``;
- ``run.stepN.safetensors``: the last ``average_last`` validated models (older ones are deleted);
- ``run.averaged.safetensors``: their element-wise mean, written at the end (fairseq's
  average_checkpoints.py), when there are two or more.

These files hold the model alone (no optimizer), with the task's ``model_extra()`` (e.g. a
translation model's subword vocabulary) and the validation metrics that chose them.
"""
import os

from ctransformer.checkpoint import average_checkpoints, save_checkpoint


def stem(path):
    """`path` without its .safetensors suffix: the prefix of every file kept beside it."""
    return path[: -len(".safetensors")] if path.endswith(".safetensors") else path


class KeptModels:
    """The best and the last validated models of a run with checkpoint `checkpoint`.

    `metric` is (metrics key, "max" or "min"), or None to keep no best model; `average_last` is how many
    of the last validated models to keep for averaging (0: none). `config` and `extra` go into every file.
    """

    def __init__(self, checkpoint, metric, average_last, config, extra):
        if metric is not None and metric[1] not in ("max", "min"):
            raise ValueError(f"KeptModels: metric must be (key, 'max' or 'min'), got {metric!r}")
        self.checkpoint, self.metric, self.average_last = checkpoint, metric, average_last
        self.config, self.extra = config, extra
        self.best = None         # {"value": the metric, signed so that larger is better, "step": ...}
        self.snapshots = []      # paths of the last validated models, oldest first

    def state(self):
        """What a checkpoint carries so that --resume keeps choosing as if the run had never stopped."""
        return {"best": self.best, "snapshots": list(self.snapshots)}

    def restore(self, state):
        self.best = state.get("best")
        self.snapshots = list(state.get("snapshots", []))

    def offer(self, model, step, metrics):
        """After a validation at `step` (its metrics): keep the model if it is the best so far, and as
        one of the last `average_last`."""
        if self.metric is None or self.metric[0] not in metrics:
            return
        key, direction = self.metric
        value = metrics[key] if direction == "max" else -metrics[key]
        extra = {**self.extra, "validation": metrics}
        if self.best is None or value > self.best["value"]:
            self.best = {"value": value, "step": step}
            save_checkpoint(stem(self.checkpoint) + ".best.safetensors", model, step=step, config=self.config,
                            extra=extra)
        if self.average_last > 0:
            path = f"{stem(self.checkpoint)}.step{step}.safetensors"
            save_checkpoint(path, model, step=step, config=self.config, extra=extra)
            self.snapshots = [p for p in self.snapshots if p != path] + [path]
            while len(self.snapshots) > self.average_last:
                old = self.snapshots.pop(0)
                if os.path.exists(old):
                    os.remove(old)

    def average(self):
        """(path of the averaged model, how many it averages), or (None, 0) with fewer than two kept."""
        snapshots = [p for p in self.snapshots if os.path.exists(p)]
        if len(snapshots) < 2:
            return None, 0
        path = stem(self.checkpoint) + ".averaged.safetensors"
        average_checkpoints(snapshots, path)
        return path, len(snapshots)
