"""GPT.from_pretrained / save_pretrained on Hugging Face GPT-2 directories (ctransformer.gpt2), against transformers.

Directories are written by ``transformers`` itself (``GPT2LMHeadModel.save_pretrained`` and ``GPT2Model``'s, random
weights, no network). Weights drawn N(0, 0.3) rather than GPT-2's N(0, 0.02), so the logits spread over O(1) and a
wrong transpose or a q/k/v split in the wrong order cannot hide in near-zero numbers. Then:
- logits equal GPT2LMHeadModel's: rtol 1e-5, atol 1e-5 (float32 against float32, different summation orders over
  at most 64 terms, then a tied head; seen ~1e-6);
- transformers' loss (labels shifted inside, -100 ignored) to rel 1e-6, and every parameter's gradient to rel 1e-4
  of its largest entry against torch float32 and rel 1e-5 against float64 (assert_grads_close's criterion; GELU and
  softmax are smooth, so no knife edge decides a gradient);
- greedy decoding (generate with top_k=1) equals ``generate(do_sample=False)`` token for token along the steps whose
  top-two logits are KNIFE apart (two float32 routes may order a near-tie either way; the rest of a row is then free);
- a saved directory loads in transformers with nothing missing or unexpected and gives the same logits bit for bit;
- the byte-level BPE gives GPT2Tokenizer's ids on Tiny Shakespeare, with merges trained here by ``tokenizers``.
"""
import json
import os

import numpy as np
import pytest
import torch

import ctransformer as ct
from ctransformer.gpt2 import causal_lm_loss, to_ours
from helpers import assert_close
from reference.parity import single_threaded_torch  # noqa: F401 (autouse fixture)

transformers = pytest.importorskip("transformers")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

VOCAB, POSITIONS = 97, 40
KNIFE = 1e-4   # logits here are O(1); the two libraries' float32 logits differ by ~1e-6


def gpt2(seed=0, **changes):
    """A random GPT2LMHeadModel (eval mode, dropout 0), its weights N(0, 0.3) and LayerNorms 1 + N(0, 0.1)."""
    torch.manual_seed(seed)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=POSITIONS, n_embd=32, n_layer=2, n_head=4,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                                     eos_token_id=0, **changes)
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0, 0.3)
    return model


def ids(seed=1, shape=(3, 11)):
    return np.random.default_rng(seed).integers(0, VOCAB, shape)


def hf_logits(model, x):
    with torch.no_grad():
        return model(torch.tensor(x)).logits.numpy()


@pytest.mark.parametrize("prefix", [True, False], ids=["lm-head-model", "base-model"])
def test_from_pretrained_equals_transformers_and_saves_back(tmp_path, prefix):
    hf = gpt2() if prefix else gpt2(n_inner=48)   # n_inner unset is 4 * n_embd; set, it is the MLP's width
    if prefix:
        hf.save_pretrained(tmp_path / "hf")
    else:   # GPT2Model's file: no "transformer." prefix and no head (the head is the tied wte)
        hf.transformer.save_pretrained(tmp_path / "hf")
    names = list(safetensors_numpy.load_file(str(tmp_path / "hf" / "model.safetensors")))
    assert all(n.startswith("transformer.") for n in names) == prefix
    model = ct.nn.GPT.from_pretrained(str(tmp_path / "hf"))
    assert not model.training and model.n_layers == 2 and model.d_inner == (128 if prefix else 48)
    x = ids()
    expected = hf_logits(hf, x)
    assert expected.std() > 0.5            # spread: a wrong weight cannot hide in near-zero logits
    assert_close(model(x)[0].numpy(), expected, rtol=1e-5, atol=1e-5, what="logits")

    out = model.save_pretrained(str(tmp_path / "ours"))
    back, info = transformers.GPT2LMHeadModel.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    theirs = hf.state_dict()
    for name, value in back.state_dict().items():   # hf's own weights came back, so its logits bit for bit
        assert torch.equal(value, theirs[name]), name
    assert np.array_equal(hf_logits(back.eval(), x), expected)


def test_loss_and_gradients_equal_transformers():
    hf = gpt2(seed=2)
    twin = transformers.GPT2LMHeadModel(hf.config).double().eval()
    twin.load_state_dict(hf.state_dict())
    x = ids(seed=3)
    labels = x.copy()
    labels[0, 4:7] = -100                  # ignored positions, as a padded batch's
    for model in (hf, twin):
        loss = model(torch.tensor(x), labels=torch.tensor(labels)).loss
        loss.backward()
    ours = ct.nn.GPT(vocab_size=VOCAB, max_seq_len=POSITIONS, n_layers=2, d_model=32, n_head=4, d_inner=128)
    state = {k: v.numpy() for k, v in hf.state_dict().items()}
    ours.load_state_dict(to_ours({k[len("transformer."):] if k.startswith("transformer.") else k: v
                                  for k, v in state.items() if not k.endswith(".attn.bias")}, 2, 32))
    ours.eval()
    mine, _ = causal_lm_loss(ours, x, labels)
    mine.backward()
    assert mine.item() == pytest.approx(loss.item(), rel=1e-6)
    grads = dict(ours.named_parameters())
    for reference, rel in ((hf, 1e-4), (twin, 1e-5)):
        theirs = to_ours({n[len("transformer."):]: p.grad.double().numpy() for n, p in reference.named_parameters()},
                         2, 32)
        scale = max(float(np.abs(g).max()) for g in theirs.values())
        for name, param in grads.items():
            err = float(np.abs(param.grad.numpy() - theirs[name]).max())
            mag = float(np.abs(theirs[name]).max())
            assert err <= rel * mag + 1e-6 * scale, f"{name}: max abs error {err:.3g}, max |grad| {mag:.3g}"


def test_greedy_equals_generate(tmp_path):
    hf = gpt2(seed=4)
    hf.save_pretrained(tmp_path)
    model = ct.nn.GPT.from_pretrained(str(tmp_path))
    prompt = ids(seed=5, shape=(3, 6))
    steps = 20
    with torch.no_grad():
        out = hf.generate(torch.tensor(prompt), attention_mask=torch.ones(prompt.shape, dtype=torch.long),
                          do_sample=False, max_new_tokens=steps, min_new_tokens=steps, pad_token_id=0,
                          output_logits=True, return_dict_in_generate=True)
    theirs, logits = out.sequences.numpy(), torch.stack(out.logits, 1).numpy()
    with ct.no_grad():
        got = ct.decode.generate(model, prompt, steps, top_k=1)
    compared = 0
    for r in range(prompt.shape[0]):
        for t in range(steps):
            top2 = np.sort(logits[r, t])[-2:]
            if top2[1] - top2[0] < KNIFE:
                break
            assert got[r, 6 + t] == theirs[r, 6 + t], f"row {r}, step {t}: {got[r]} vs {theirs[r]}"
            compared += 1
    assert compared >= 0.8 * prompt.shape[0] * steps, f"only {compared} tokens were off the knife edge"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_half_precision_files_and_old_buffers_load(tmp_path, dtype):
    """A float16 or bfloat16 file loads cast to float32 (the logits of transformers' model holding the same rounded
    weights); an older file's attn.bias and attn.masked_bias buffers are ignored."""
    from safetensors.torch import save_file

    hf = gpt2(seed=6)
    half = {k: v.to(dtype) for k, v in hf.state_dict().items() if k != "lm_head.weight"}
    buffers = {"transformer.h.0.attn.bias": torch.ones(POSITIONS, POSITIONS, dtype=dtype).tril()[None, None],
               "transformer.h.0.attn.masked_bias": torch.tensor(-1e4, dtype=dtype)}
    hf.config.save_pretrained(tmp_path)
    save_file({**half, **buffers}, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    model = ct.nn.GPT.from_pretrained(str(tmp_path))
    rounded = transformers.GPT2LMHeadModel(hf.config).eval()
    missing, unexpected = rounded.load_state_dict({k: v.float() for k, v in half.items()}, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}   # the head is the tied wte
    rounded.tie_weights()
    x = ids(seed=7)
    assert_close(model(x)[0].numpy(), hf_logits(rounded, x), rtol=1e-5, atol=1e-5, what=f"{dtype} logits")


def test_bad_directories_raise_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a directory"):
        ct.nn.GPT.from_pretrained(str(tmp_path / "absent"))
    with pytest.raises(FileNotFoundError, match="config.json"):
        ct.nn.GPT.from_pretrained(str(tmp_path))
    gpt2().save_pretrained(tmp_path)
    config_file = tmp_path / "config.json"
    config = json.loads(config_file.read_text())

    def refused(match, **changes):
        config_file.write_text(json.dumps({**config, **changes}))
        with pytest.raises(ValueError, match=match):
            ct.nn.GPT.from_pretrained(str(tmp_path))

    refused("only 'gpt2'", model_type="llama")
    refused("activation_function = 'relu'", activation_function="relu")
    refused("layer_norm_epsilon = 1e-06", layer_norm_epsilon=1e-6)
    refused("scale_attn_weights = False", scale_attn_weights=False)
    refused("scale_attn_by_inverse_layer_idx = True", scale_attn_by_inverse_layer_idx=True)
    refused("tie_word_embeddings = False", tie_word_embeddings=False)
    refused("n_head = 5", n_head=5)
    refused("(?s)do not fit its config.json", n_embd=64, n_head=4)
    config_file.write_text(json.dumps(config))
    os.remove(tmp_path / "model.safetensors")
    marker = tmp_path / "ran"
    with open(tmp_path / "pytorch_model.bin", "wb") as f:   # a pickle that would create `marker` if unpickled
        f.write(b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR.")
    with pytest.raises(ValueError, match="never loads a pickle"):
        ct.nn.GPT.from_pretrained(str(tmp_path))
    assert not marker.exists()
    with pytest.raises(ValueError, match="labels must be token ids"):
        causal_lm_loss(ct.nn.GPT(vocab_size=VOCAB, max_seq_len=8, n_layers=1, d_model=8, n_head=2, d_inner=16),
                       ids(shape=(1, 4)), np.array([[1, 2, -5, 3]]))


def test_byte_level_bpe_ids_equal_gpt2_tokenizers(tmp_path):
    """Merges trained by tokenizers on Tiny Shakespeare; our ids equal transformers' GPT2Tokenizer (the Python
    reference of GPT-2's BPE) on text it was not trained on, and decode gives the text back."""
    import gzip

    import tokenizers

    from ctransformer.data.download import fetch
    from ctransformer.gpt2 import GPT2Tokenizer

    with gzip.open(fetch("tinyshakespeare/input.txt.gz"), "rt", encoding="utf-8") as f:
        text = f.read()
    train, held_out = text[:200_000], text[-20_000:]
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator([train], vocab_size=600, min_frequency=2, special_tokens=["<|endoftext|>"],
                            show_progress=False)
    bpe.save_model(str(tmp_path))
    ours = GPT2Tokenizer(str(tmp_path))
    theirs = transformers.GPT2Tokenizer(str(tmp_path / "vocab.json"), str(tmp_path / "merges.txt"))
    sample = held_out + " Ünïcödé — and tabs\tand  double  spaces\n"
    got = ours.encode(sample)
    assert got == theirs.encode(sample) and len(got) < 0.6 * len(sample)
    assert ours.decode(got) == sample
    assert len(ours) == 600 and ours.eos_token_id == theirs.convert_tokens_to_ids("<|endoftext|>")
    with pytest.raises(TypeError, match="text must be a str"):
        ours.encode(b"bytes")
