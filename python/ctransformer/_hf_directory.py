"""What the Hugging Face model directories ctransformer reads have in common (ctransformer.marian, ctransformer.gpt2):
``config.json`` read and checked for its ``model_type``, and pickled weight files refused with the one command that
converts them to safetensors."""
import json
import os

CONFIG_NAME, WEIGHTS_NAME = "config.json", "model.safetensors"
PICKLED_NAMES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack")


class PretrainedError(ValueError):
    """The directory is not a model this library can load."""


def read_config(path, where, model_type, what):
    """config.json of the directory `path` as a dict, after checking that it describes `model_type` (`what` names
    the models so described, for the error). `where` starts every message."""
    file = os.path.join(path, CONFIG_NAME)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{where}: {path} is not a directory (expected a Hugging Face model folder "
                                f"with {CONFIG_NAME} and {WEIGHTS_NAME})")
    if not os.path.isfile(file):
        raise FileNotFoundError(f"{where}: {path} has no {CONFIG_NAME}")
    with open(file, encoding="utf-8") as f:
        try:
            config = json.load(f)
        except ValueError as error:
            raise PretrainedError(f"{where}: {file} is not JSON: {error}") from None
    kind = config.get("model_type") if isinstance(config, dict) else None
    if kind != model_type:
        raise PretrainedError(f"{where}: {file} describes model_type {kind!r}; only {model_type!r} ({what}) can be "
                              "loaded")
    return config


def refuse_pickles(path, where, model_class):
    """Raise if the directory holds pickled weights instead of safetensors: a pickle can run code when loaded. The
    message gives the conversion to run where transformers is installed (`model_class`: transformers' class)."""
    pickled = [name for name in PICKLED_NAMES if os.path.exists(os.path.join(path, name))]
    if pickled:
        raise PretrainedError(
            f"{where}: {path} holds {pickled[0]}, not {WEIGHTS_NAME}. ctransformer never loads a pickle "
            "(it can run code). Convert it once where transformers and torch are installed:\n"
            f"    python -c \"from transformers import {model_class}; "
            f"{model_class}.from_pretrained('{path}').save_pretrained('{path}', safe_serialization=True)\"")


def write(path, weights, config):
    """Write `weights` ({name: float32 array}) as model.safetensors and `config` as config.json into the directory
    `path`, created if needed, as transformers' save_pretrained lays them out. Returns path."""
    from safetensors.numpy import save_file

    os.makedirs(path, exist_ok=True)
    save_file(weights, os.path.join(path, WEIGHTS_NAME), metadata={"format": "pt"})
    with open(os.path.join(path, CONFIG_NAME), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    return path
