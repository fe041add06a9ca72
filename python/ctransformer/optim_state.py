"""torch.optim's state-dict format for ctransformer's Adam and AdamW, in Python (as tinygrad keeps its
optimizers readable). The C++ binding only converts: ``Adam._param_state(group, index)`` gives one parameter's
state, ``Adam._load(...)`` commits a state this module has checked.

The layout is torch's, so a state moves both ways between ctransformer and torch::

    {"state": {i: {"step": int, "exp_avg": array, "exp_avg_sq": array}, ...},
     "param_groups": [{"params": [i, ...], "lr": ..., "betas": (b1, b2), "eps": ..., "weight_decay": ...,
                       "amsgrad": False, "maximize": False, "decoupled_weight_decay": bool}, ...]}

i numbers the parameters across the groups in order; a parameter never updated has no "state" entry.
Loading checks everything before anything changes: a bad state dict leaves the optimizer as it was.
"""
import numbers

import numpy as np

# The group keys ctransformer's Adam keeps; torch's other keys (foreach, capturable, ...) are ignored.
HYPERPARAMETERS = ("lr", "betas", "eps", "weight_decay", "initial_lr")


def state_dict(optimizer):
    """The optimizer's state in torch's layout, NumPy copies."""
    state, groups, flat = {}, [], 0
    for g, group in enumerate(optimizer.param_groups):
        hypers = group.to_dict()
        count = len(hypers.pop("params"))
        for i in range(count):
            saved = optimizer._param_state(g, i)
            if saved is not None:
                step, exp_avg, exp_avg_sq = saved
                state[flat + i] = {"step": step, "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
        groups.append({"params": list(range(flat, flat + count)), **hypers, "amsgrad": False, "maximize": False,
                       "decoupled_weight_decay": optimizer.decoupled_weight_decay})
        flat += count
    return {"state": state, "param_groups": groups}


def _item(d, key, where):
    if not isinstance(d, dict):
        raise TypeError(f"{where}: expected a dict, got {type(d).__name__}")
    if key not in d:
        raise ValueError(f"{where}: missing key '{key}'")
    return d[key]


def _whole(value, where):
    """An int, or a float with no fraction (torch keeps steps as float tensors), in the int64 range."""
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:     # a NumPy or torch scalar
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{where}: expected a number, got {type(value).__name__}")
    if isinstance(value, numbers.Integral):
        whole = int(value)
    elif not (np.isfinite(value) and float(value).is_integer()):
        raise ValueError(f"{where}: expected an integer, got {value!r}")
    else:
        whole = int(value)
    if not -2**63 <= whole < 2**63:
        raise ValueError(f"{where} = {value!r} is out of range (expected an integer between -2**63 and 2**63 - 1)")
    return whole


def load_state_dict(optimizer, state_dict):
    """Restore steps, moments and group hyperparameters from a state dict of ctransformer's or torch's
    Adam/AdamW."""
    name = "AdamW" if optimizer.decoupled_weight_decay else "Adam"
    where = f"{name}.load_state_dict: state_dict"
    saved_groups = _item(state_dict, "param_groups", where)
    saved_state = _item(state_dict, "state", where)
    if not isinstance(saved_groups, (list, tuple)):
        raise TypeError(f"{where}['param_groups']: expected a list of dicts, got {type(saved_groups).__name__}")
    if not isinstance(saved_state, dict):
        raise TypeError(f"{where}['state']: expected a dict, got {type(saved_state).__name__}")
    groups = optimizer.param_groups
    if len(saved_groups) != len(groups):
        raise ValueError(f"{where} has {len(saved_groups)} parameter groups, the optimizer has {len(groups)}")

    hypers, where_is = [], {}         # where_is: saved id -> (group, index)
    for g, (saved, group) in enumerate(zip(saved_groups, groups)):
        w = f"{where}['param_groups'][{g}]"
        ids = _item(saved, "params", w)
        count = len(group["params"])
        if len(ids) != count:
            raise ValueError(f"{w} has {len(ids)} params, the optimizer's group {count}; the state dict is for "
                             "another model")
        for i, saved_id in enumerate(ids):
            where_is[_whole(saved_id, f"{w}['params'][{i}]")] = (g, i)
        for key in ("amsgrad", "maximize"):
            if saved.get(key):
                raise ValueError(f"{w}: {key}=True is not supported by ctransformer's {name}")
        decoupled = saved.get("decoupled_weight_decay")
        if decoupled is not None and bool(decoupled) != optimizer.decoupled_weight_decay:
            raise ValueError(f"{w}: decoupled_weight_decay={decoupled} is from {'AdamW' if decoupled else 'Adam'}, "
                             f"this optimizer is {name}")
        hypers.append({k: v for k, v in saved.items() if k in HYPERPARAMETERS})

    states = []
    for saved_id, entry in saved_state.items():
        w = f"{where}['state'][{saved_id!r}]"
        place = where_is.get(_whole(saved_id, w))
        if place is None:
            raise ValueError(f"{w}: no parameter has this index in state_dict['param_groups']")
        g, i = place
        step = _whole(_item(entry, "step", w), f"{w}['step']")
        if step < 0:
            raise ValueError(f"{w}['step']: must be >= 0, got {step}")
        moments = [_item(entry, key, w) for key in ("exp_avg", "exp_avg_sq")]
        shape = tuple(groups[g]["params"][i].shape)
        for key, moment in zip(("exp_avg", "exp_avg_sq"), moments):
            got = tuple(np.shape(moment))
            if got != shape:
                raise ValueError(f"{w}: {key} has shape {_shape(got)}, the parameter {_shape(shape)}")
        states.append((g, i, step, *moments, w))
    optimizer._load(where, hypers, states)


def _shape(shape):
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
