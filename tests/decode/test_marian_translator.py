"""Translator.from_pretrained and ctransformer-translate --pretrained on a Hugging Face Marian directory.

The directory is what transformers writes (MarianMTModel.save_pretrained, random weights made lively as in
test_marian_generate.py) plus the tokenizer files of tests/marian_dirs.py, no network. Greedy translations
(beam_size 1) and beam-4 ones (decode.hf_beam_search) go through the same ids as transformers' generate() with
the same settings, so the text equals MarianTokenizer.decode of generate()'s output, off the knife edge (the
test keeps the sentences off it, and requires all but one of them). Beam search, int8 and the
command line are checked for what they promise: text out, the rules kept, the same as the library call.
"""
import os

import numpy as np
import pytest
import torch

import ctransformer as ct
from ctransformer.translator import Translator
from marian_dirs import write_generation, write_marian_dir
from test_marian_generate import KNIFE, lively

transformers = pytest.importorskip("transformers")

SENTENCES = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest ein Buch.",
             "Kinder spielen Fußball auf einer Wiese.", "Ein alter Mann sitzt auf einer Bank.", "Hallo!"]


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("opus_mt_random")
    hf = write_marian_dir(path)
    pad = hf.config.pad_token_id
    lively(hf, ct.nn.Transformer(ct.nn.TransformerConfig.marian(
        vocab=hf.config.vocab_size, d_model=32, d_inner=64, n_layers=2, n_head=4, n_position=128, pad_idx=pad)), pad, 1.5)
    hf.save_pretrained(str(path))   # the lively weights over the plain ones
    write_generation(path, pad, {"num_beams": 1, "max_length": 24})
    return str(path), hf


@pytest.mark.parametrize("beam", [1, 4])
def test_translation_equals_transformers(marian_dir, beam):
    """Greedy: where no step of the sentence is within KNIFE of a tie. Beam 4 (decode.hf_beam_search): where
    transformers' two best finished hypotheses are not within KNIFE of each other."""
    path, hf = marian_dir
    tok = transformers.MarianTokenizer(source_spm=os.path.join(path, "source.spm"),
                                       target_spm=os.path.join(path, "target.spm"), vocab=os.path.join(path, "vocab.json"))
    translator = Translator.from_pretrained(path, beam_size=beam, batch_size=1, max_len_ratio=100.0)
    assert translator.search == "hf" and translator.max_length == 24   # generation_config.json's max_length decides
    ours = translator.translate(SENTENCES)
    compared = 0
    for sentence, text in zip(SENTENCES, ours):
        enc = tok([sentence], return_tensors="pt")
        with torch.no_grad():
            out = hf.generate(**enc, num_beams=beam, num_return_sequences=beam, do_sample=False, max_length=24,
                              output_logits=True, output_scores=True, return_dict_in_generate=True)
        if beam == 1:
            logits = torch.stack(out.logits, 1)[0].numpy()
            logits[:, hf.config.pad_token_id] = -np.inf
            top2 = np.sort(logits, -1)[:, -2:]
            if (top2[:-1, 1] - top2[:-1, 0] < KNIFE).any():   # the last step is forced to eos
                continue
        elif out.sequences_scores[0] - out.sequences_scores[1] < KNIFE:
            continue
        assert text == tok.decode(out.sequences[0], skip_special_tokens=True)
        compared += 1
    assert compared >= len(SENTENCES) - 1


def test_beam_int8_and_overrides(marian_dir):
    path, _ = marian_dir
    translator = Translator.from_pretrained(path, beam_size=4)
    texts = translator.translate(SENTENCES + [""])
    gnmt = Translator.from_pretrained(path, beam_size=4, search="gnmt", length_penalty=0.6).translate(SENTENCES)
    assert len(gnmt) == len(SENTENCES) and all(isinstance(t, str) for t in gnmt)
    assert len(texts) == len(SENTENCES) + 1 and texts[-1] == "" and all(isinstance(t, str) for t in texts)
    assert translator.translate(SENTENCES[:2], beam_size=1) == Translator.from_pretrained(path).translate(SENTENCES[:2])
    assert translator.beam_size == 4
    with ct.decode.using_compute_type(translator.model, "int8"):
        assert len(translator.translate(SENTENCES)) == len(SENTENCES)
    with pytest.raises(TypeError, match="list of sentences"):
        translator.translate("Ein Satz.")
    with pytest.raises(ValueError, match="beam_size"):
        translator.translate(SENTENCES, beam_size=0)


def test_command_line_pretrained(marian_dir, tmp_path, capsys):
    from ctransformer.translate import main

    path, _ = marian_dir
    source = tmp_path / "in.txt"
    source.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    assert main(["--pretrained", path, "--input", str(source), "--output", str(out), "--beam-size", "1"]) == 0
    assert out.read_text(encoding="utf-8").splitlines() == Translator.from_pretrained(path).translate(SENTENCES)
    for flags in (["--compute-type", "int8"], ["--precision", "bf16"]):
        assert main(["--pretrained", path, "--input", str(source), "--output", str(out), *flags]) == 0
        assert len(out.read_text(encoding="utf-8").splitlines()) == len(SENTENCES)
    with pytest.raises(SystemExit):
        main(["--pretrained", path, "--save-quantized", str(tmp_path / "q")])
    assert "--save-quantized writes a ctransformer checkpoint" in capsys.readouterr().err
