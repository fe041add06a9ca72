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

__all__ = [
    "Optimizer", "Adam", "AdamW", "ParamGroup", "LRScheduler", "LambdaLR", "StepLR", "CosineWarmupLR",
    "NoamLambda", "ScheduledOptim", "rate", "cosine_with_warmup", "clip_grad_norm_",
]
