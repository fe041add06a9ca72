"""A wrong type in any argument of a public entry point is a TypeError or ValueError that names the function and
the argument (issue 36), never an AttributeError from inside the wrapper nor pybind11's "incompatible function
arguments" listing every overload. The decoding functions have their own sweep in test_bad_input.py."""
import numpy as np
import pytest

import ctransformer as ct
from ctransformer.checkpoint import load_checkpoint, save_checkpoint
from ctransformer.marian import save_pretrained
from ctransformer.translator import Translator


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wrong-types")
    model = ct.nn.Transformer(n_src_vocab=11, n_trg_vocab=11, src_pad_idx=0, trg_pad_idx=0, d_word_vec=16,
                              d_model=16, d_inner=32, n_layers=1, n_head=2, d_k=8, d_v=8).eval()
    path = str(folder / "model.safetensors")
    save_checkpoint(path, model)
    src = np.ones((2, 5), np.int64)
    return {"model": model, "path": path, "folder": folder, "src": src, "mask": ct.nn.get_pad_mask(src, 0),
            "optimizer": ct.optim.Adam(model.parameters())}


def _calls(p):
    """(function, argument, call) for every case; `p` holds the fixture's parts."""
    p = p or dict.fromkeys(("model", "path", "src", "mask", "folder", "optimizer"))   # None: the names only
    model, path, src, mask, folder = p["model"], p["path"], p["src"], p["mask"], p["folder"]
    params = model.parameters() if model is not None else None
    yield "to_ctranslate2", "model", lambda: ct.export.to_ctranslate2("model", str(folder / "o"), ["a"])
    yield "to_ctranslate2", "path", lambda: ct.export.to_ctranslate2(model, 3, [str(i) for i in range(11)])
    yield "to_ctranslate2", "vocabulary", lambda: ct.export.to_ctranslate2(model, str(folder / "o"), 3)
    yield "quantize_dynamic", "model", lambda: ct.quantize_dynamic("model")
    yield "quantize_dynamic", "dtype", lambda: ct.quantize_dynamic(model, dtype=3)
    yield "save_checkpoint", "path", lambda: save_checkpoint(3, model)
    yield "save_checkpoint", "model", lambda: save_checkpoint(path + ".x", "model")
    yield "save_checkpoint", "optimizer", lambda: save_checkpoint(path + ".x", model, "optimizer")
    yield "save_checkpoint", "scheduler", lambda: save_checkpoint(path + ".x", model, None, 3)
    yield "save_checkpoint", "step", lambda: save_checkpoint(path + ".x", model, step="3")
    yield "save_checkpoint", "config", lambda: save_checkpoint(path + ".x", model, config=3)
    yield "save_checkpoint", "extra", lambda: save_checkpoint(path + ".x", model, extra=[1])
    yield "load_checkpoint", "path", lambda: load_checkpoint(3, model)
    yield "load_checkpoint", "model", lambda: load_checkpoint(path, "model")
    yield "load_checkpoint", "optimizer", lambda: load_checkpoint(path, model, 3)
    yield "load_checkpoint", "config", lambda: load_checkpoint(path, model, config="x")
    yield "Translator", "model", lambda: Translator("model", None)
    yield "Translator", "vocab", lambda: Translator(model, 3)
    yield "Translator.from_pretrained", "path", lambda: Translator.from_pretrained(3)
    yield "from_pretrained", "path", lambda: ct.nn.Transformer.from_pretrained(3)
    yield "save_pretrained", "model", lambda: save_pretrained("model", str(folder / "hf"))
    yield "save_pretrained", "path", lambda: save_pretrained(model, 3)
    yield "MarianTokenizer", "path", lambda: ct.data.MarianTokenizer(3)
    yield "hf_beam_search", "model", lambda: ct.decode.hf_beam_search("model", src, mask, 6, 1, 2)
    yield "hf_beam_search", "max_len", lambda: ct.decode.hf_beam_search(model, src, mask, "6", 1, 2)
    yield "hf_beam_search", "start_symbol", lambda: ct.decode.hf_beam_search(model, src, mask, 6, 1.5, 2)
    yield "hf_beam_search", "end_symbol", lambda: ct.decode.hf_beam_search(model, src, mask, 6, 1, "2")
    yield "hf_beam_search", "num_beams", lambda: ct.decode.hf_beam_search(model, src, mask, 6, 1, 2, num_beams="4")
    yield "hf_beam_search", "length_penalty", lambda: ct.decode.hf_beam_search(model, src, mask, 6, 1, 2,
                                                                             length_penalty="1")
    yield "hf_beam_search", "force_end", lambda: ct.decode.hf_beam_search(model, src, mask, 6, 1, 2, force_end="no")
    yield "StepDecoder", "model", lambda: ct.decode.StepDecoder("model", src, mask)
    yield "StepDecoder", "src", lambda: ct.decode.StepDecoder(model, "abc", mask)
    for name in ("Adam", "AdamW"):
        cls = getattr(ct.optim, name)
        yield name, "params", lambda cls=cls: cls("params")
        yield name, "lr", lambda cls=cls: cls(params, lr="x")
        yield name, "betas", lambda cls=cls: cls(params, betas="x")
        yield name, "eps", lambda cls=cls: cls(params, eps=None)
        yield name, "weight_decay", lambda cls=cls: cls(params, weight_decay="0")
    yield "load_state_dict", "state_dict", lambda: p["optimizer"].load_state_dict(3)
    yield "clip_grad_norm_", "parameters", lambda: ct.optim.clip_grad_norm_("x", 1.0)
    yield "clip_grad_norm_", "max_norm", lambda: ct.optim.clip_grad_norm_(params, "x")
    yield "clip_grad_norm_", "norm_type", lambda: ct.optim.clip_grad_norm_(params, 1.0, norm_type=None)
    yield "LambdaLR", "optimizer", lambda: ct.optim.LambdaLR("optimizer", lambda step: 1.0)
    yield "StepLR", "step_size", lambda: ct.optim.StepLR(ct.optim.Adam(params), "3")
    yield "CosineWarmupLR", "warmup_iters", lambda: ct.optim.CosineWarmupLR(ct.optim.Adam(params), "3", 10, 0.1)
    yield "autocast", "dtype", lambda: ct.autocast(dtype=3).__enter__()
    yield "autocast", "enabled", lambda: ct.autocast(enabled="yes")
    yield "load_state_dict", "state_dict", lambda: model.load_state_dict(3)
    yield "Transformer", "n_layers", lambda: ct.nn.Transformer(11, 11, 0, 0, n_layers="2")
    yield "GPT", "n_layers", lambda: ct.nn.GPT(11, 8, "1", 16, 2, 32, 0.0)


CASES = [(fn, argument) for fn, argument, _ in _calls(None)]


@pytest.mark.parametrize("fn, argument", CASES, ids=[f"{fn}-{argument}" for fn, argument in CASES])
def test_wrong_type_names_the_function_and_the_argument(parts, fn, argument):
    call = next(c for f, a, c in _calls(parts) if (f, a) == (fn, argument))
    with pytest.raises((TypeError, ValueError)) as error:
        call()
    message = str(error.value)
    assert fn.split(".")[-1] in message and argument in message, message
    assert "incompatible function arguments" not in message and "incompatible constructor" not in message
