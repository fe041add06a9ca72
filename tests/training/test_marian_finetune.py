"""Fine-tuning a pretrained Marian model: ctransformer-train multi30k --init-from DIR --save-pretrained OUT.

A random opus-mt-like directory (tests/marian_dirs.py: transformers' MarianMTModel with tokenizer files) is
trained for 40 steps on 600 Multi30k pairs given as a corpus of one's own (--set train_src=... train_tgt=...).
The validation loss falls from the starting model's (computed here with the same tokenizer and the task's
batching rule: the decoder starts on the pad id, the loss ignores the pad) by more than a tenth, and the
directory written back loads in transformers with no missing weight, and gives the logits ctransformer gives
for the same directory to 1e-5 (float32 against float32 in two libraries; test_marian.py bounds the same
comparison at rtol 1e-5, atol 1e-6 on logits of order 1).
"""
import json
import math

import numpy as np
import pytest
import torch

import ctransformer as ct
from ctransformer.data.marian_tokenizer import MarianTokenizer
from ctransformer.data.parallel_corpus import multi30k
from ctransformer.data.token_batches import make_arrays
from ctransformer.train import main
from marian_dirs import write_marian_dir

transformers = pytest.importorskip("transformers")


def val_loss(model, tok, src_lines, tgt_lines):
    pad, eos = model.config.trg_pad_idx, tok.eos_id
    src, tgt = make_arrays(tok.encode(src_lines, add_eos=False), tok.encode(tgt_lines, target=True, add_eos=False),
                           pad=pad, bos=pad, eos=eos)
    model.eval()
    with ct.no_grad():
        loss = ct.functional.cross_entropy(model(src, tgt[:, :-1]), tgt[:, 1:].reshape(-1), ignore_index=pad)
    return loss.item()


def test_fine_tune_lowers_validation_loss_and_saves_back(tmp_path, num_threads):   # main(--threads 1) sets them
    pretrained = tmp_path / "opus-mt-random"
    write_marian_dir(pretrained)
    train, val = multi30k("train"), multi30k("val")
    files = {}
    for name, lines in (("train.de", train.src[:600]), ("train.en", train.tgt[:600]), ("val.de", val.src[:40]),
                        ("val.en", val.tgt[:40])):
        files[name] = tmp_path / name
        files[name].write_text("\n".join(lines) + "\n", encoding="utf-8")
    tok = MarianTokenizer(str(pretrained))
    before = val_loss(ct.nn.Transformer.from_pretrained(str(pretrained)), tok, val.src[:40], val.tgt[:40])
    out, result = tmp_path / "fine-tuned", tmp_path / "result.json"
    code = main(["multi30k", "--init-from", str(pretrained), "--save-pretrained", str(out), "--steps", "40",
                 "--threads", "1", "--no-progress", "--json", str(result), "--set",
                 f"train_src={files['train.de']}", f"train_tgt={files['train.en']}", f"valid_src={files['val.de']}",
                 f"valid_tgt={files['val.en']}", "schedule=fitted", "lr=1e-3", "warmup_fraction=0.1",
                 "batch_tokens=1024", "beam_size=1", "val_sentences=10"])
    assert code == 0
    final = json.loads(result.read_text())["evaluation"]["val_loss"]
    assert math.isfinite(before) and final < 0.9 * before, (before, final)

    ours = ct.nn.Transformer.from_pretrained(str(out))
    assert val_loss(ours, tok, val.src[:40], val.tgt[:40]) == pytest.approx(final, rel=1e-5)
    back, info = transformers.MarianMTModel.from_pretrained(str(out), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    src, tgt = make_arrays(tok.encode(val.src[:4], add_eos=False), tok.encode(val.tgt[:4], target=True, add_eos=False),
                           pad=ours.config.trg_pad_idx, bos=ours.config.trg_pad_idx, eos=tok.eos_id)
    pad = ours.config.trg_pad_idx
    with torch.no_grad():
        expected = back.eval()(input_ids=torch.tensor(src), attention_mask=torch.tensor(src != pad),
                               decoder_input_ids=torch.tensor(tgt[:, :-1])).logits.numpy()
    got = ours(src, tgt[:, :-1]).numpy().reshape(expected.shape)
    assert np.abs(got - expected).max() <= 1e-5
    for name in ("source.spm", "target.spm", "vocab.json"):
        assert (out / name).read_bytes() == (pretrained / name).read_bytes()


def test_save_pretrained_needs_init_from(capsys):
    with pytest.raises(SystemExit):
        main(["multi30k", "--save-pretrained", "x", "--steps", "1"])
    assert "start it with --init-from" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["copy", "--init-from", "x"])
    assert "does not start from or save pretrained models" in capsys.readouterr().err
