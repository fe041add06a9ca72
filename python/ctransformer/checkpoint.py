"""Checkpoints in one safetensors file: model, optimizer, schedule, step and config.

Tensors go in as tensors (``model.<name>``, ``optimizer.<path>``, ``scheduler.<path>``); everything
else (config, counters, hyperparameters) goes in the metadata as JSON. Loading parses a header
and copies bytes: no code is executed (no pickle). A SHA-256 of all tensor bytes, kept in the
metadata, catches corruption that still parses. Before safetensors reads anything, the file's
layout is checked against its size (_check_layout): a header that claims more bytes than the file
holds is refused before anything is allocated. Saving writes a temporary file in the same folder,
syncs it, renames it over the target and syncs the folder, so a crash or power cut mid-save leaves
the previous checkpoint whole (tests/checkpoint/test_checkpoint_faults.py kills a saving process at random).

A model quantised to int8 (``model.quantize("int8")``) is saved quantised: each quantised Linear's weight
as int8 (``<name>.weight``, dtype I8) with its per-row scales (``<name>.weight_scale``, float32), as
CTranslate2 names them, and ``"quantization": "int8"`` in the metadata. A Linear whose weight is tied to
another entry (the output projection sharing the embedding) keeps that float32 entry, and is quantised
again on loading, to the same int8 (the rule is deterministic). Loading gives the float32 weight
q * scale and the int8 weight exactly as stored.
"""
import hashlib
import json
import os
import tempfile

import numpy as np

from ctransformer import _arguments
from ctransformer.precision import ALIASES as PRECISION_ALIASES

FORMAT = "ctransformer-checkpoint-1"
# safetensors' own cap on the JSON header (its MAX_HEADER_SIZE); ours has a few hundred bytes per tensor.
MAX_HEADER_BYTES = 100_000_000
# Bytes per element of each safetensors dtype a checkpoint may hold.
_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
                "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}


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


def _remove_stale_temp_files(folder, name):
    """Remove temp files a killed save of `name` left behind: they carry their writer's pid, and
    a file whose writer is gone will never be renamed. Another live process's save is left alone."""
    prefix = f".{name}."
    for entry in os.listdir(folder):
        if not (entry.startswith(prefix) and entry.endswith(".tmp")):
            continue
        pid = entry[len(prefix):].split(".", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            try:
                os.remove(os.path.join(folder, entry))
            except FileNotFoundError:  # another saver removed it first
                pass
        except PermissionError:  # alive, another user's
            pass


def _linears(module, prefix=""):
    """(name, Linear) of every Linear below module, in the order of named_children."""
    from ._core.nn import Linear

    for name, child in module.named_children():
        if isinstance(child, Linear):
            yield prefix + name, child
        yield from _linears(child, f"{prefix}{name}.")


def _model_tensors(model):
    """The model's entries for the file: its state_dict, with each quantised, untied Linear weight as int8 and
    its scales (see the module's docstring)."""
    state = model.state_dict()
    tensors = {f"model.{k}": np.ascontiguousarray(v) for k, v in state.items()}
    if getattr(model, "quantization", None) is None:  # anything with a state_dict() can be saved
        return tensors
    for name, linear in _linears(model):
        int8, key = linear.int8_weight, f"{name}.weight"
        if int8 is None:
            continue
        # Tied weights hold equal values; two untied weights that happen to be equal are kept as float32 too.
        if any(k != key and v.shape == state[key].shape and np.array_equal(v, state[key]) for k, v in state.items()):
            continue
        tensors[f"model.{key}"] = int8.q
        tensors[f"model.{name}.weight_scale"] = int8.scale
    return tensors


def model_state(tensors, metadata, path="checkpoint"):
    """(float32 state_dict, {linear name: Int8Weight}) from a checkpoint's tensors: a quantised checkpoint's
    int8 weights become q * scale in the state_dict and are returned as Int8Weights besides. Raises
    CheckpointError on an int8 entry without its scales or of the wrong dtype."""
    from .quantization import Int8Weight

    state = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    int8 = {}
    if metadata.get("quantization") is None:
        return state, int8
    if metadata["quantization"] != "int8":
        raise CheckpointError(f"checkpoint: {path} is quantised to {metadata['quantization']!r}; this version reads int8")
    for scale_key in [k for k in state if k.endswith(".weight_scale")]:
        key = scale_key[:-len("_scale")]
        q, scale = state.pop(key, None), state.pop(scale_key)
        if q is None or q.dtype != np.int8 or q.ndim != 2 or scale.dtype != np.float32 or scale.shape != q.shape[:1]:
            raise CheckpointError(f"checkpoint: {path} has a malformed int8 weight {key!r} (an int8 (out, in) "
                                  "weight and float32 (out,) scales expected)")
        try:
            int8[key[:-len(".weight")]] = Int8Weight(q, scale)
        except ValueError as error:
            raise CheckpointError(f"checkpoint: {path}: {key}: {error}") from error
        state[key] = q.astype(np.float32) * scale[:, None]
    unscaled = [k for k, v in state.items() if v.dtype == np.int8]
    if unscaled:
        raise CheckpointError(f"checkpoint: {path} has int8 weights without their scales: {', '.join(unscaled)}")
    return state, int8


def load_model_state(model, state, int8, quantization):
    """Load (state, int8) from model_state into model: with quantization "int8", every Linear is quantised
    and those stored in int8 take their stored weights exactly; a float32 checkpoint loaded into a quantised
    model leaves it quantised, from the loaded weights. Raises RuntimeError as load_state_dict."""
    model.load_state_dict(state, strict=True)  # a quantised model re-quantises from the loaded weights
    if quantization is None:
        return
    model.quantize(quantization)
    linears = dict(_linears(model))
    for name, weight in int8.items():
        if name not in linears:
            raise RuntimeError(f"load_state_dict: the int8 weight {name!r} names no Linear of this model")
        linears[name].set_int8_weight(weight)


def _check_optimizer_and_scheduler(optimizer, scheduler, caller):
    method = "state_dict" if caller == "save_checkpoint" else "load_state_dict"
    for name, article, value in (("optimizer", "an", optimizer), ("scheduler", "a", scheduler)):
        if value is not None:
            _arguments.with_methods(value, f"{caller}: {name}", [method], f"{article} {name} with a {method}() (or None)")


def save_checkpoint(path, model, optimizer=None, scheduler=None, step=0, config=None, extra=None):
    """Write model (+ optimizer, scheduler) state, the step, the config and `extra` atomically. A model
    quantised to int8 is stored quantised (see the module's docstring)."""
    path = _arguments.path(path, "save_checkpoint: path")
    _arguments.with_methods(model, "save_checkpoint: model", ["state_dict"], "a model (anything with a state_dict())")
    _check_optimizer_and_scheduler(optimizer, scheduler, "save_checkpoint")
    step = _arguments.integer(step, "save_checkpoint: step", minimum=0)
    config, extra = _arguments.mapping(config, "save_checkpoint: config"), _arguments.mapping(extra, "save_checkpoint: extra")
    tensors = _model_tensors(model)
    metadata = {"format": FORMAT, "step": json.dumps(step), "config": json.dumps(config),
                "extra": json.dumps(_flatten(extra, "extra", tensors))}
    if getattr(model, "quantization", None) is not None:
        metadata["quantization"] = model.quantization
    if optimizer is not None:
        metadata["optimizer"] = json.dumps(_flatten(optimizer.state_dict(), "optimizer", tensors))
    if scheduler is not None:
        metadata["scheduler"] = json.dumps(_flatten(scheduler.state_dict(), "scheduler", tensors))
    return _write(path, tensors, metadata)


def _write(path, tensors, metadata):
    """Write tensors + metadata (its checksum added) to a temporary file, sync it, rename it over `path`
    and sync the folder."""
    from safetensors.numpy import save

    metadata = {**metadata, "sha256": _digest(tensors)}
    folder = os.path.dirname(os.path.abspath(path))
    _remove_stale_temp_files(folder, os.path.basename(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.{os.getpid()}.", suffix=".tmp", dir=folder)
    try:
        # The bytes are built in memory and written to our own temp file: safetensors' save_file
        # writes through a temp file of its own (".tmpXXXXXX"), which a kill mid-save left behind
        # with no pid to tell it from another process's (tests/checkpoint/test_checkpoint_faults.py).
        with os.fdopen(fd, "wb") as f:
            f.write(save(tensors, metadata=metadata))
            f.flush()
            os.fsync(f.fileno())  # the bytes are on disk before the name points at them
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    # The rename itself lives in the folder's entry: sync it too, or a power cut could undo it.
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def _check_layout(path):
    """Check the safetensors layout against the file's size before anything is read into memory:
    8 bytes of little-endian header length, a JSON header within the file, and tensors whose
    dtype x shape bytes equal their offsets, which lie within the file. Raises CheckpointError."""
    size = os.path.getsize(path)

    def bad(why):
        return CheckpointError(f"checkpoint: {path} is not a readable safetensors file (truncated or "
                               f"corrupted?): {why}")

    if size < 8:
        raise bad(f"it holds {size} bytes, fewer than the 8 of the header length")
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if n > MAX_HEADER_BYTES or 8 + n > size:
            raise bad(f"its header claims {n} bytes, but the file holds {size} bytes "
                      f"(and a header may hold at most {MAX_HEADER_BYTES})")
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as error:
        raise bad(f"its header is not JSON: {error}") from None
    if not isinstance(header, dict):
        raise bad("its header is not a JSON object")
    data = size - 8 - n
    for name, info in header.items():
        if name == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise bad("its __metadata__ is not a map of strings")
            continue
        try:
            dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
            ok = (dtype in _DTYPE_BYTES and isinstance(shape, list)
                  and all(type(d) is int and d >= 0 for d in shape)
                  and type(begin) is int and type(end) is int and 0 <= begin <= end <= data)
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            raise bad(f"tensor {name!r} has a malformed entry {str(info)[:200]} (data section: {data} bytes)")
        count = 1
        for d in shape:
            count *= d  # Python ints: no overflow for any claimed shape
        if count * _DTYPE_BYTES[dtype] != end - begin:
            raise bad(f"tensor {name!r} claims shape {shape} of {dtype} ({count * _DTYPE_BYTES[dtype]} bytes) "
                      f"in {end - begin} bytes of data")


def read_checkpoint(path):
    """(tensors, metadata) after checking the format and the checksum; raises CheckpointError."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint: no file at {path}")
    _check_layout(path)
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


def read_checkpoint_contents(path):
    """{"model": {name: array}, "int8", "quantization", "step", "config", "extra"} of a checkpoint, without a
    model to load into (the model's float32 weights under their own names, a quantised checkpoint's int8
    weights in "int8" as model_state gives them, extra with its arrays put back); raises CheckpointError on
    a damaged file, as load_checkpoint does. For readers that build the model from the stored config, and
    load it with load_model_state."""
    tensors, metadata = read_checkpoint(path)
    state, int8 = model_state(tensors, metadata, path)
    return {"model": state, "int8": int8, "quantization": metadata.get("quantization"),
            "step": _metadata_json(metadata, "step", path),
            "config": _metadata_json(metadata, "config", path, default="{}"),
            "extra": _metadata_state(metadata, "extra", path, tensors) if "extra" in metadata else {}}


def load_checkpoint(path, model, optimizer=None, scheduler=None, config=None):
    """Load into model (and optimizer, scheduler); returns {"step", "config", "extra"}.

    When `config` is given it must equal the stored config, else CheckpointError names the
    differing keys (a checkpoint of another model). Shapes are checked by load_state_dict.
    """
    path = _arguments.path(path, "load_checkpoint: path")
    _arguments.with_methods(model, "load_checkpoint: model", ["load_state_dict"],
                            "a model (anything with a load_state_dict())")
    _check_optimizer_and_scheduler(optimizer, scheduler, "load_checkpoint")
    _arguments.mapping(config, "load_checkpoint: config")
    tensors, metadata = read_checkpoint(path)
    stored_config = _metadata_json(metadata, "config", path, default="{}")
    if isinstance(stored_config.get("precision"), str):   # written before "bf16" became "bfloat16"
        stored_config["precision"] = PRECISION_ALIASES.get(stored_config["precision"], stored_config["precision"])
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
    state, int8 = model_state(tensors, metadata, path)
    try:
        load_model_state(model, state, int8, metadata.get("quantization"))
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
        if metadata.get("quantization"):
            raise CheckpointError(f"average_checkpoints: {path} is quantised; average the float32 checkpoints, then quantise")
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
