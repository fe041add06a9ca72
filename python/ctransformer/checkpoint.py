"""Checkpoints in one safetensors file: model, optimizer, schedule, step and config.

Tensors go in as tensors (``model.<name>``, ``optimizer.<path>``, ``scheduler.<path>``); everything
else (config, counters, hyperparameters) goes in the metadata as JSON. Loading parses a header
and copies bytes: no code is executed (no pickle). A SHA-256 of all tensor bytes, kept in the
metadata, catches corruption that still parses. Saving writes a temporary file in the same folder,
syncs it and renames it over the target, so a crash mid-save leaves the previous checkpoint whole.
"""
import hashlib
import json
import os
import tempfile

import numpy as np

FORMAT = "ctransformer-checkpoint-1"


class CheckpointError(ValueError):
    """The file is not a readable ctransformer checkpoint, or does not fit what it is loaded into."""


def _flatten(obj, prefix, tensors):
    """Replace every NumPy array in a nested dict/list by a reference to a named tensor."""
    if isinstance(obj, np.ndarray):
        tensors[prefix] = np.ascontiguousarray(obj)
        return {"__tensor__": prefix}
    if isinstance(obj, dict):
        return {"__dict__": [[_flatten(k, f"{prefix}.k{i}", tensors), _flatten(v, f"{prefix}.{i}", tensors)]
                             for i, (k, v) in enumerate(obj.items())]}
    if isinstance(obj, (list, tuple)):
        return {"__list__": [_flatten(v, f"{prefix}.{i}", tensors) for i, v in enumerate(obj)],
                "tuple": isinstance(obj, tuple)}
    if isinstance(obj, (np.integer, np.floating)):
        return obj.item()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"checkpoint: cannot store a value of type {type(obj).__name__} at {prefix!r}")


def _unflatten(obj, tensors):
    if isinstance(obj, dict):
        if "__tensor__" in obj:
            return tensors[obj["__tensor__"]]
        if "__dict__" in obj:
            return {_unflatten(k, tensors): _unflatten(v, tensors) for k, v in obj["__dict__"]}
        if "__list__" in obj:
            items = [_unflatten(v, tensors) for v in obj["__list__"]]
            return tuple(items) if obj.get("tuple") else items
    return obj


def _digest(tensors):
    h = hashlib.sha256()
    for name in sorted(tensors):
        h.update(name.encode())
        h.update(np.ascontiguousarray(tensors[name]).tobytes())
    return h.hexdigest()


def save_checkpoint(path, model, optimizer=None, scheduler=None, step=0, config=None, extra=None):
    """Write model (+ optimizer, scheduler) state, the step, the config and `extra` atomically."""
    tensors = {f"model.{k}": np.ascontiguousarray(v) for k, v in model.state_dict().items()}
    metadata = {"format": FORMAT, "step": json.dumps(int(step)), "config": json.dumps(config or {}),
                "extra": json.dumps(_flatten(extra or {}, "extra", tensors))}
    if optimizer is not None:
        metadata["optimizer"] = json.dumps(_flatten(optimizer.state_dict(), "optimizer", tensors))
    if scheduler is not None:
        metadata["scheduler"] = json.dumps(_flatten(scheduler.state_dict(), "scheduler", tensors))
    return _write(path, tensors, metadata)


def _write(path, tensors, metadata):
    """Write tensors + metadata (its checksum added) to a temporary file, sync it, rename it over `path`."""
    from safetensors.numpy import save_file

    metadata = {**metadata, "sha256": _digest(tensors)}
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".safetensors", dir=folder)
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata=metadata)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path


def read_checkpoint(path):
    """(tensors, metadata) after checking the format and the checksum; raises CheckpointError."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint: no file at {path}")
    try:
        from safetensors import safe_open

        with safe_open(path, framework="numpy") as f:
            metadata = f.metadata() or {}
        tensors = load_file(path)
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(f"checkpoint: {path} is not a readable safetensors file "
                              f"(truncated or corrupted?): {error}") from error
    if metadata.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint: {path} is not a ctransformer checkpoint (format "
                              f"{metadata.get('format')!r}, expected {FORMAT!r})")
    if _digest(tensors) != metadata.get("sha256"):
        raise CheckpointError(f"checkpoint: {path} is corrupted (its tensors do not match the stored checksum)")
    return tensors, metadata


def _metadata_json(metadata, key, path, default=None):
    """The JSON value stored under `key`; a tampered or truncated entry is a CheckpointError naming the file."""
    if key not in metadata:
        if default is not None:
            return json.loads(default)
        raise CheckpointError(f"checkpoint: {path} has no {key!r} entry in its metadata")
    try:
        return json.loads(metadata[key])
    except (ValueError, RecursionError) as error:   # json.JSONDecodeError is a ValueError
        raise CheckpointError(f"checkpoint: {path} has a corrupted {key!r} entry in its metadata "
                              f"(not valid JSON: {error})") from error


def _metadata_state(metadata, key, path, tensors):
    """The entry `key` with its tensors put back; a structure _flatten could not have written is a
    CheckpointError naming the file (the entries are JSON anyone can edit; the checksum covers tensors only)."""
    try:
        return _unflatten(_metadata_json(metadata, key, path), tensors)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        if isinstance(error, CheckpointError):
            raise
        raise CheckpointError(f"checkpoint: {path} has a corrupted {key!r} entry in its metadata "
                              f"({type(error).__name__}: {error})") from error


def load_checkpoint(path, model, optimizer=None, scheduler=None, config=None):
    """Load into model (and optimizer, scheduler); returns {"step", "config", "extra"}.

    When `config` is given it must equal the stored config, else CheckpointError names the
    differing keys (a checkpoint of another model). Shapes are checked by load_state_dict.
    """
    tensors, metadata = read_checkpoint(path)
    stored_config = _metadata_json(metadata, "config", path, default="{}")
    if config is not None and json.loads(json.dumps(config)) != stored_config:
        keys = sorted(k for k in set(config) | set(stored_config) if config.get(k) != stored_config.get(k))
        raise CheckpointError(f"checkpoint: {path} was saved for another configuration; differing keys: "
                              + ", ".join(f"{k} (file {stored_config.get(k)!r}, here {config.get(k)!r})" for k in keys))
    # Every metadata entry is parsed before anything is loaded: a corrupted one leaves the model as it was.
    states = {}
    for name, target in (("optimizer", optimizer), ("scheduler", scheduler)):
        if target is None:
            continue
        if name not in metadata:
            raise CheckpointError(f"checkpoint: {path} holds no {name} state")
        states[name] = _metadata_state(metadata, name, path, tensors)
    step = _metadata_json(metadata, "step", path)
    extra = _metadata_state(metadata, "extra", path, tensors)
    model_state = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    try:
        model.load_state_dict(model_state, strict=True)
    except RuntimeError as error:
        raise CheckpointError(f"checkpoint: {path} does not fit this model: {error}") from error
    for name, target in (("optimizer", optimizer), ("scheduler", scheduler)):
        if target is not None:
            target.load_state_dict(states[name])
    return {"step": step, "config": stored_config, "extra": extra}


def average_checkpoints(paths, output):
    """Write to `output` the element-wise mean of the model weights of `paths` (fairseq's
    average_checkpoints.py); step, config and extra are the last file's, optimizer state is dropped.

    The files must hold the same weights by name and shape (checkpoints of one run). The mean is taken
    in float64 and stored in each weight's dtype.
    """
    paths = list(paths)
    if not paths:
        raise ValueError("average_checkpoints: no checkpoint paths given")
    total, metadata = None, None
    for path in paths:
        tensors, metadata = read_checkpoint(path)
        weights = {k: v for k, v in tensors.items() if k.startswith("model.")}
        if total is None:
            total = {k: v.astype(np.float64) for k, v in weights.items()}
            dtypes = {k: v.dtype for k, v in weights.items()}
            continue
        if weights.keys() != total.keys() or any(weights[k].shape != total[k].shape for k in total):
            raise CheckpointError(f"average_checkpoints: {path} does not hold the same weights as {paths[0]}")
        for k in total:
            total[k] += weights[k]
    averaged = {k: (v / len(paths)).astype(dtypes[k]) for k, v in total.items()}
    extra_tensors = {k: v for k, v in tensors.items() if k.startswith("extra.")}
    kept = {k: metadata[k] for k in ("format", "step", "config", "extra")}
    return _write(output, {**averaged, **extra_tensors}, kept)
