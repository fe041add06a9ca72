"""Quantised checkpoints (ctransformer.checkpoint): a model quantised to int8 saves its Linears as int8 weights with
per-row float32 scales (CTranslate2's names: weight, weight_scale) and loads back to the same int8 model, bit for
bit; a Linear tied to an embedding keeps its float32 entry and is quantised again on loading, to the same bytes."""
import os

import numpy as np
import pytest

import ctransformer as ct
from ctransformer.checkpoint import (CheckpointError, average_checkpoints, load_checkpoint, read_checkpoint,
                                     save_checkpoint)

CFG = dict(d_word_vec=32, d_model=32, d_inner=64, n_layers=2, n_head=4, d_k=8, d_v=8)


def model(tied, seed=0):
    ct.manual_seed(seed)
    return ct.nn.Transformer(50, 50, 0, 0, **CFG, trg_emb_prj_weight_sharing=tied, emb_src_trg_weight_sharing=tied).eval()


def int8_weights(m):
    from ctransformer.checkpoint import _linears
    return {name: (lin.int8_weight.q, lin.int8_weight.scale) for name, lin in _linears(m)}


def outputs(m):
    rng = np.random.default_rng(0)
    with ct.no_grad():
        return m(rng.integers(1, 50, (3, 7)), rng.integers(1, 50, (3, 6))).numpy()


@pytest.mark.parametrize("tied", [False, True])
def test_round_trip_is_exact(tmp_path, tied):
    m = model(tied).quantize("int8")
    path = save_checkpoint(str(tmp_path / "q.safetensors"), m, step=3)
    tensors, metadata = read_checkpoint(path)
    assert metadata["quantization"] == "int8"
    assert tensors["model.encoder.layer_stack.1.slf_attn.w_qs.weight"].dtype == np.int8
    assert tensors["model.encoder.layer_stack.1.slf_attn.w_qs.weight_scale"].dtype == np.float32
    assert tensors["model.trg_word_prj.weight"].dtype == (np.float32 if tied else np.int8)
    fp32 = save_checkpoint(str(tmp_path / "f.safetensors"), model(tied))
    assert os.path.getsize(path) < 0.6 * os.path.getsize(fp32)
    loaded = model(tied, seed=1)
    assert load_checkpoint(path, loaded)["step"] == 3
    assert loaded.quantization == "int8"
    mine, theirs = int8_weights(m), int8_weights(loaded)
    assert mine.keys() == theirs.keys()
    for name in mine:
        np.testing.assert_array_equal(mine[name][0], theirs[name][0], err_msg=name)
        np.testing.assert_array_equal(mine[name][1], theirs[name][1], err_msg=name)
    np.testing.assert_array_equal(outputs(loaded), outputs(m))
    w = loaded.encoder.layer_stack[1].slf_attn.w_qs
    np.testing.assert_array_equal(w.weight.numpy(), w.int8_weight.q.astype(np.float32) * w.int8_weight.scale[:, None])


def test_a_float_checkpoint_into_a_quantised_model_requantises(tmp_path):
    path = save_checkpoint(str(tmp_path / "f.safetensors"), model(False, seed=1))
    m = model(False).quantize("int8")
    load_checkpoint(path, m)
    assert m.quantization == "int8"
    np.testing.assert_array_equal(outputs(m), outputs(model(False, seed=1).quantize("int8")))


def test_damaged_int8_entries_are_refused(tmp_path):
    from ctransformer.checkpoint import _write
    path = save_checkpoint(str(tmp_path / "q.safetensors"), model(False).quantize("int8"))
    tensors, metadata = read_checkpoint(path)
    key = "model.encoder.layer_stack.0.pos_ffn.w_1.weight"
    for name, change in [("no scale", lambda t: t.pop(key + "_scale")),
                         ("float scale of the wrong length", lambda t: t.update({key + "_scale": t[key + "_scale"][:3]})),
                         ("-128", lambda t: t[key].__setitem__((0, 0), -128))]:
        broken = {k: v.copy() for k, v in tensors.items()}
        change(broken)
        bad = str(tmp_path / "bad.safetensors")
        _write(bad, broken, {k: v for k, v in metadata.items() if k != "sha256"})
        with pytest.raises(CheckpointError):
            load_checkpoint(bad, model(False))
    odd = str(tmp_path / "int4.safetensors")
    _write(odd, tensors, {**{k: v for k, v in metadata.items() if k != "sha256"}, "quantization": "int4"})
    with pytest.raises(CheckpointError, match="quantised to 'int4'"):
        load_checkpoint(odd, model(False))
    with pytest.raises(CheckpointError, match="is quantised"):
        average_checkpoints([path, path], str(tmp_path / "avg.safetensors"))
