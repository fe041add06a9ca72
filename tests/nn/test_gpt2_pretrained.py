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


def assert_greedy_equals_generate(hf, tmp_path, prompt_seed):
    """hf saved and loaded as ours: greedy decoding (top_k=1) equals transformers' generate(do_sample=False) token for
    token along the steps whose top-two logits are KNIFE apart, over at least 80% of the steps."""
    hf.save_pretrained(tmp_path)
    model = ct.nn.GPT.from_pretrained(str(tmp_path))
    prompt = ids(seed=prompt_seed, shape=(3, 6))
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


def test_greedy_equals_generate(tmp_path):
    hf = gpt2(seed=4)
    assert_greedy_equals_generate(hf, tmp_path, prompt_seed=5)


# GPT-2's variants (GPT2Config's fields), each computed: eps 1e-4 (the issue's) and 0.05 (so that eps moves the
# logits well past the tolerance), every activation transformers names that the GPT computes, the scores unscaled,
# scaled by the layer too, upcast and reordered (float32 already), and a head of its own.
VARIANTS = {
    "eps-1e-4": dict(layer_norm_epsilon=1e-4),
    "eps-0.05": dict(layer_norm_epsilon=0.05),
    "gelu": dict(activation_function="gelu"),
    "relu": dict(activation_function="relu"),
    "silu": dict(activation_function="silu"),
    "gelu_pytorch_tanh": dict(activation_function="gelu_pytorch_tanh"),
    "unscaled": dict(scale_attn_weights=False),
    "by-layer": dict(scale_attn_by_inverse_layer_idx=True),
    "by-layer-unscaled": dict(scale_attn_by_inverse_layer_idx=True, scale_attn_weights=False),
    "upcast": dict(reorder_and_upcast_attn=True, scale_attn_by_inverse_layer_idx=True),
    "untied": dict(tie_word_embeddings=False),
}


def variant(changes, seed=8):
    """A random GPT2LMHeadModel with `changes`; untied, its lm_head drawn apart from wte. Scores unscaled are
    sqrt(8) times larger, so those models' weights are drawn smaller (N(0, 0.15)) to keep the softmax off
    saturation, where one float32 ulp of a score decides which key takes all."""
    hf = gpt2(seed=seed, **changes)
    with torch.no_grad():
        if not changes.get("scale_attn_weights", True):
            for name, p in hf.named_parameters():
                if "attn.c_attn" in name:
                    p.mul_(0.5)
        if not changes.get("tie_word_embeddings", True):
            assert hf.lm_head.weight.data_ptr() != hf.transformer.wte.weight.data_ptr()
            hf.lm_head.weight.normal_(0, 0.3)
    return hf


def relu_inputs_off_zero(hf, x, margin=2e-5):
    """With ReLU, the MLP's pre-activations of the reference are all further than `margin` from 0 (20 times the
    ~1e-6 the two libraries' float32 differ by here), so that no rounding can flip a unit on or off between them and
    a gradient is decided by the maths, not by a rounding."""
    seen = []
    hooks = [block.mlp.c_fc.register_forward_hook(lambda m, i, out: seen.append(out.detach().abs().min().item()))
             for block in hf.transformer.h]
    with torch.no_grad():
        hf(torch.tensor(x))
    for h in hooks:
        h.remove()
    return min(seen) > margin


@pytest.mark.parametrize("name", list(VARIANTS))
def test_gpt2_variants_load_and_equal_transformers_logits_and_gradients(tmp_path, name):
    """Each variant loads from transformers' own directory and gives GPT2LMHeadModel's logits (rtol 1e-5, atol 1e-5,
    as the plain model's), transformers' loss (rel 1e-6) and every gradient (rel 1e-4 of the parameter's largest
    against float32, 1e-5 against float64, as test_loss_and_gradients_equal_transformers); saved back, transformers
    loads it with the same fields and nothing missing, and its logits equal transformers' bit for bit."""
    changes = VARIANTS[name]
    x = ids(seed=9)
    hf = variant(changes)
    if changes.get("activation_function") == "relu":   # the first seed whose ReLU inputs keep off the edge
        hf = next(m for m in map(lambda seed: variant(changes, seed), range(8, 40)) if relu_inputs_off_zero(m, x))
    hf.save_pretrained(tmp_path / "hf")
    model = ct.nn.GPT.from_pretrained(str(tmp_path / "hf"))
    for field, value in changes.items():
        if field == "activation_function":
            assert model.activation_function == {"gelu_pytorch_tanh": "gelu_new"}.get(value, value)
        elif field == "layer_norm_epsilon":
            assert model.layer_norm_epsilon == pytest.approx(value, rel=1e-7)
        elif field != "reorder_and_upcast_attn":
            assert getattr(model, field) == value, field
    expected = hf_logits(hf, x)
    assert expected.std() > 0.5
    assert_close(model(x)[0].numpy(), expected, rtol=1e-5, atol=1e-5, what=f"{name} logits")

    labels = x.copy()
    labels[1, 2:5] = -100
    twin = transformers.GPT2LMHeadModel(hf.config).double().eval()
    twin.load_state_dict(hf.state_dict())
    for reference in (hf, twin):
        loss = reference(torch.tensor(x), labels=torch.tensor(labels)).loss
        loss.backward()
    model.train()   # dropout 0: the same maths, with the graph recorded
    mine, _ = causal_lm_loss(model, x, labels)
    mine.backward()
    assert mine.item() == pytest.approx(loss.item(), rel=1e-6)
    grads = dict(model.named_parameters())
    tied = changes.get("tie_word_embeddings", True)
    for reference, rel in ((hf, 1e-4), (twin, 1e-5)):
        named = {n[len("transformer."):] if n.startswith("transformer.") else n: p.grad.double().numpy()
                 for n, p in reference.named_parameters()}
        theirs = to_ours(named, 2, 32, tied)
        scale = max(float(np.abs(g).max()) for g in theirs.values())
        for pname, param in grads.items():
            err = float(np.abs(param.grad.numpy() - theirs[pname]).max())
            mag = float(np.abs(theirs[pname]).max())
            assert err <= rel * mag + 1e-6 * scale, f"{name}, {pname}: max abs error {err:.3g}, max |grad| {mag:.3g}"

    model.eval()
    out = model.save_pretrained(str(tmp_path / "ours"))
    config = json.loads((tmp_path / "ours" / "config.json").read_text())
    for field, value in changes.items():
        if field != "reorder_and_upcast_attn":   # computed alike either way; saved as false
            expect = "gelu_new" if value == "gelu_pytorch_tanh" else value
            assert config[field] == expect, (field, config[field])
    # Saved as the maths computed: gelu_pytorch_tanh as gelu_new (one formula, which transformers evaluates in two
    # ways, an ulp apart) and reorder_and_upcast_attn false (float32 either way); for the bitwise comparison of
    # transformers with itself, those two are loaded as the original had them.
    alike = {k: v for k, v in changes.items() if k in ("activation_function", "reorder_and_upcast_attn")}
    back, info = transformers.GPT2LMHeadModel.from_pretrained(out, output_loading_info=True, **alike)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    for pname, value in back.state_dict().items():
        if pname in hf.state_dict() and not pname.endswith(".attn.bias"):
            assert torch.equal(value, hf.state_dict()[pname]), pname
    assert np.array_equal(hf_logits(back.eval(), x), expected)


def test_a_variant_decodes_greedily_as_transformers_generates(tmp_path):
    """An untied head with the scores scaled by layer and the exact GELU: greedy decoding (cached, int8 aside)
    equals transformers' generate(do_sample=False) along the steps off the knife edge (as test_greedy_equals_generate)."""
    hf = variant(dict(tie_word_embeddings=False, scale_attn_by_inverse_layer_idx=True, activation_function="gelu"),
                 seed=10)
    assert_greedy_equals_generate(hf, tmp_path, prompt_seed=11)


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
    refused("activation_function = 'gelu_fast'", activation_function="gelu_fast")   # computed nowhere here
    refused("layer_norm_epsilon = 0", layer_norm_epsilon=0)
    refused("scale_attn_weights = 'no'", scale_attn_weights="no")
    refused("add_cross_attention = True", add_cross_attention=True)
    refused("n_head = 5", n_head=5)
    refused("(?s)unties the head.*no lm_head.weight", tie_word_embeddings=False)   # the file holds no head
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
