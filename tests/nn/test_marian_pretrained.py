"""Transformer.from_pretrained / save_pretrained on Hugging Face Marian directories (ctransformer.marian).

Directories are written by ``transformers`` itself (``MarianMTModel.save_pretrained``, random weights, no
network), in the three layouts test_marian.py proves: one vocabulary shared and tied, two vocabularies with
the output tied, and nothing tied. Loaded, the model's logits equal Hugging Face's to the same bounds as
test_marian.py (rtol 1e-5, atol 1e-6); saved back, ``transformers`` loads our directory with no missing or
unexpected weight and gives the same logits bit for bit (the same float32 weights in the same module).
"""
import json
import os

import numpy as np
import pytest
import torch

import ctransformer as ct
from helpers import assert_close
from reference.marian_pairs import batch, hf_logits, marian_pair
from test_marian import CONFIGS

transformers = pytest.importorskip("transformers")

LAYOUTS = [o for o in CONFIGS if o["activation"] != "relu"]


def saved(tmp_path, **options):
    hf, _, pad = marian_pair(**options)
    path = tmp_path / "hf"
    hf.save_pretrained(path)
    return hf, str(path), pad


@pytest.mark.parametrize("options", LAYOUTS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_from_pretrained_equals_hugging_face_and_saves_back(tmp_path, options):
    hf, path, pad = saved(tmp_path, **options)
    model = ct.nn.Transformer.from_pretrained(path)
    assert not model.training and model.config.layout == "marian"
    assert model.config.decoder_start_idx == pad and model.config.activation == hf.config.activation_function.replace(
        "swish", "silu")
    src, dec_in, _ = batch(hf.config.vocab_size, hf.config.decoder_vocab_size, pad)
    with torch.no_grad():
        expected = hf_logits(hf, src, dec_in, pad).numpy()
    assert_close(model(src, dec_in).numpy().reshape(expected.shape), expected, rtol=1e-5, atol=1e-6, what="logits")

    out = tmp_path / "ours"
    model.save_pretrained(str(out))
    back, info = transformers.MarianMTModel.from_pretrained(str(out), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    for key in ("share_encoder_decoder_embeddings", "tie_word_embeddings", "activation_function", "d_model",
                "vocab_size", "decoder_vocab_size", "pad_token_id", "decoder_start_token_id", "scale_embedding",
                "encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads",
                "encoder_ffn_dim", "decoder_ffn_dim"):
        assert getattr(back.config, key) == getattr(hf.config, key), key
    with torch.no_grad():
        again = hf_logits(back.eval(), src, dec_in, pad).numpy()
    assert np.array_equal(again, expected)


def test_a_file_with_every_tied_copy_loads(tmp_path):
    """Older conversions store the tied copies and the positional tables too; they load the same."""
    from safetensors.numpy import save_file

    hf, path, pad = saved(tmp_path, share=True, tie=True, activation="swish")
    save_file({k: v.numpy().copy() for k, v in hf.state_dict().items()}, os.path.join(path, "model.safetensors"))
    model = ct.nn.Transformer.from_pretrained(path)
    src, dec_in, _ = batch(50, 50, pad)
    with torch.no_grad():
        expected = hf_logits(hf, src, dec_in, pad).numpy()
    assert_close(model(src, dec_in).numpy().reshape(expected.shape), expected, rtol=1e-5, atol=1e-6, what="logits")


def test_a_pickle_is_refused_with_the_conversion(tmp_path):
    hf, path, _ = saved(tmp_path)
    os.remove(os.path.join(path, "model.safetensors"))
    marker = tmp_path / "ran"
    # A pickle that would create `marker` if anything unpickled it.
    with open(os.path.join(path, "pytorch_model.bin"), "wb") as f:
        f.write(b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR.")
    with pytest.raises(ValueError, match=r"(?s)pytorch_model.bin.*never loads a pickle.*save_pretrained"):
        ct.nn.Transformer.from_pretrained(path)
    assert not marker.exists()


def test_bad_directories_raise_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a directory"):
        ct.nn.Transformer.from_pretrained(str(tmp_path / "absent"))
    with pytest.raises(FileNotFoundError, match="config.json"):
        ct.nn.Transformer.from_pretrained(str(tmp_path))
    hf, path, _ = saved(tmp_path)
    config_file = os.path.join(path, "config.json")
    config = json.load(open(config_file))

    def write(**changes):
        json.dump({**config, **changes}, open(config_file, "w"))

    write(model_type="bart")
    with pytest.raises(ValueError, match="only 'marian'"):
        ct.nn.Transformer.from_pretrained(path)
    write(decoder_attention_heads=3)   # 3 heads cannot split d_model = 16, in transformers either
    with pytest.raises(ValueError, match="decoder_attention_heads = 3.*d_model = 16"):
        ct.nn.Transformer.from_pretrained(path)
    write(decoder_layers=config["encoder_layers"] + 1)   # a side's own size is read: the file lacks a layer
    with pytest.raises(ValueError, match="(?s)do not fit its config.json.*model.decoder.layers.2"):
        ct.nn.Transformer.from_pretrained(path)
    write(tie_word_embeddings=False)
    with pytest.raises(ValueError, match="tie_word_embeddings false"):
        ct.nn.Transformer.from_pretrained(path)
    write(activation_function="tanh")
    with pytest.raises(ValueError, match="activation must be"):
        ct.nn.Transformer.from_pretrained(path)
    write(d_model=config["d_model"] * 2)   # the weights no longer fit the configuration
    with pytest.raises(ValueError, match="(?s)do not fit its config.json.*shape"):
        ct.nn.Transformer.from_pretrained(path)
    write()
    with open(os.path.join(path, "model.safetensors"), "r+b") as f:   # a truncated file
        f.truncate(100)
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        ct.nn.Transformer.from_pretrained(path)


def test_save_pretrained_refuses_other_layouts(tmp_path):
    post = ct.nn.Transformer(10, 10, 0, 0, d_word_vec=8, d_model=8, d_inner=16, n_layers=1, n_head=2, d_k=4, d_v=4)
    with pytest.raises(ValueError, match="only a 'marian' model"):
        post.save_pretrained(str(tmp_path))
