"""Optimizers, learning-rate schedules and gradient clipping, in C++ (``torch.optim`` semantics).

- ``Adam`` / ``AdamW``: torch.optim's updates; ``params`` is a list of Tensors or of group dicts;
  ``param_groups[i]["lr"] = x`` takes effect; ``state_dict()`` / ``load_state_dict()`` resume exactly.
- ``LambdaLR`` (a Python callable or a C++ ``NoamLambda``), ``StepLR``, ``CosineWarmupLR``:
  torch.optim.lr_scheduler's semantics (construction sets the epoch-0 lr, ``step()`` advances).
- ``rate``: the Annotated Transformer's Noam schedule; ``cosine_with_warmup``: nanoGPT's ``get_lr``.
- ``ScheduledOptim``: the wrapper of jadore801120's reference (``step_and_update_lr``, ``zero_grad``).
- ``clip_grad_norm_``: torch.nn.utils.clip_grad_norm_, returning the total norm as a float.
"""
from ._core.optim import (
    Adam,
    AdamW,
    CosineWarmupLR,
    LambdaLR,
    LRScheduler,
    NoamLambda,
    Optimizer,
    ParamGroup,
    ScheduledOptim,
    StepLR,
    clip_grad_norm_,
    cosine_with_warmup,
    rate,
)

from . import optim_state as _optim_state


def _state_dict(self) -> dict:
    """{'state': {i: {'step', 'exp_avg', 'exp_avg_sq'}}, 'param_groups': [...]}: NumPy copies in torch's layout
    (ctransformer.optim_state)."""
    return _optim_state.state_dict(self)


def _load_state_dict(self, state_dict: dict) -> None:
    """Restore steps, moments and group hyperparameters (also from torch.optim.Adam/AdamW state dicts); a bad
    state dict raises and leaves the optimizer as it was (ctransformer.optim_state)."""
    _optim_state.load_state_dict(self, state_dict)


# The format is Python's; the optimizer and its update are C++'s (AdamW inherits both from Adam).
Adam.state_dict = _state_dict
Adam.load_state_dict = _load_state_dict

__all__ = [
    "Optimizer", "Adam", "AdamW", "ParamGroup", "LRScheduler", "LambdaLR", "StepLR", "CosineWarmupLR",
    "NoamLambda", "ScheduledOptim", "rate", "cosine_with_warmup", "clip_grad_norm_",
]
