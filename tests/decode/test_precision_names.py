"""One word for the precision setting (issue 36): ``precision`` with "float32", "bfloat16" and "int8" (and
"default" when decoding), "fp32"/"bf16" and CTranslate2's ``compute_type`` as aliases that take the same path.

Each alias is checked against its canonical spelling on the same model in the same process: the same kernels
run, so the logits are equal to the bit. That the spelling chose the path it names is checked by the int8
logits' distance from the float32 ones (int8 moves them ~1e-2; 1e-4 is far from both)."""
import numpy as np
import pytest

import ctransformer as ct
from ctransformer.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from ctransformer.tasks import TASKS


@pytest.fixture(scope="module")
def model_and_source():
    ct.manual_seed(0)
    model = ct.nn.Transformer(n_src_vocab=40, n_trg_vocab=40, src_pad_idx=0, trg_pad_idx=0, d_word_vec=32,
                              d_model=32, d_inner=64, n_layers=1, n_head=4, d_k=8, d_v=8)
    model.eval()
    src = np.random.default_rng(0).integers(1, 40, size=(3, 7))
    return model, src, ct.nn.get_pad_mask(src, 0)


def _logits(model, src, mask, **precision):
    _, logits = ct.decode.greedy_decode(model, src, mask, 6, 1, return_logits=True, **precision)
    return logits


def test_canonical_names_and_aliases():
    assert ct.precision.canonical("bf16", ct.precision.TRAINING, "t") == "bfloat16"
    assert ct.precision.canonical("fp32", ct.precision.DECODING, "t") == "float32"
    assert ct.precision.canonical("int8", ct.precision.DECODING, "t") == "int8"
    with pytest.raises(ValueError, match=r"t: precision must be one of float32, bfloat16 .*got 'int8'"):
        ct.precision.canonical("int8", ct.precision.TRAINING, "t")
    with pytest.raises(ValueError, match="precision must be one of"):
        ct.precision.canonical(8, ct.precision.DECODING, "t")


@pytest.mark.parametrize("spelling", [{"precision": "int8"}, {"compute_type": "int8"},
                                      {"precision": "int8", "compute_type": "int8"}])
def test_int8_spellings_take_one_path(model_and_source, spelling):
    model, src, mask = model_and_source
    with ct.no_grad():
        with ct.decode.using_precision(model, "int8"):
            reference = _logits(model, src, mask)
        float32 = _logits(model, src, mask, precision="float32")
        got = _logits(model, src, mask, **spelling)
    np.testing.assert_array_equal(got, reference)
    first = np.isfinite(float32[:, 0])
    assert np.abs(got[:, 0][first] - float32[:, 0][first]).max() > 1e-4, "int8 was not used"
    assert model.quantization is None, "the model is left as it was"


@pytest.mark.parametrize("alias, name", [("bf16", "bfloat16"), ("fp32", "float32")])
def test_short_aliases_equal_dtype_names(model_and_source, alias, name):
    model, src, mask = model_and_source
    with ct.no_grad():
        np.testing.assert_array_equal(_logits(model, src, mask, precision=alias),
                                      _logits(model, src, mask, precision=name))
        np.testing.assert_array_equal(_logits(model, src, mask, compute_type=alias),
                                      _logits(model, src, mask, precision=name))


def test_precision_and_its_alias_must_agree(model_and_source):
    model, src, mask = model_and_source
    with pytest.raises(ValueError, match=r"greedy_decode: precision='int8' and compute_type='float32' \(its alias\)"):
        ct.decode.greedy_decode(model, src, mask, 6, 1, precision="int8", compute_type="float32")
    with pytest.raises(ValueError, match="beam_search: precision must be one of"):
        ct.decode.beam_search(model, src, mask, 6, 1, 2, precision="int4")


def test_training_config_takes_the_aliases(tmp_path):
    task = TASKS["copy"]({"precision": "bf16"})
    assert task.cfg["precision"] == "bfloat16"
    with pytest.raises(ValueError, match="copy: precision must be one of float32, bfloat16"):
        TASKS["copy"]({"precision": "int8"})
    # A checkpoint written when the config said "bf16" still resumes under the new spelling.
    model = ct.nn.Linear(2, 2)
    path = str(tmp_path / "old.safetensors")
    save_checkpoint(path, model, config={"precision": "bf16", "steps": 3})
    assert load_checkpoint(path, model, config={"precision": "bfloat16", "steps": 3})["step"] == 0
    with pytest.raises(CheckpointError, match="precision"):
        load_checkpoint(path, model, config={"precision": "float32", "steps": 3})
