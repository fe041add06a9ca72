"""Hugging Face's MarianMTModel (the opus-mt translators) against ctransformer's Transformer in the Marian layout.

Random MarianMTModels are built with ``transformers`` (no network), in the configurations opus-mt uses and
the ones it allows: swish and gelu (and relu) feed-forwards, one shared vocabulary or two, the output tied
to the target embedding or not. Their state dicts load into ``TransformerConfig.marian(...)`` models with
the same names in the same order, and then:
- logits equal MarianMTModel(...).logits for the same ids and masks (a padded source; the decoder starts on
  the pad id, which Marian does not mask): rtol 1e-5, atol 1e-6 as the post-norm model's small-size parity
  test (float32 against float32, different summation orders; seen ~2e-7);
- the gradient of every trained parameter after a cross-entropy over the labels equals Hugging Face's
  to rel 1e-4 of each tensor's largest entry, and torch float64's to rel 1e-5 (assert_grads_close's
  criterion), so fine-tuning in ctransformer is fine-tuning in Hugging Face. The gradient tests use the
  smooth activations (silu, gelu): a ReLU unit within rounding of zero would flip the gradient under a
  legal change of summation order (DEVELOPING.md, "ReLU knife edges");
- the pieces on their own: the exact gelu and silu against torch's, forward and backward, and the positional
  table (sines, then cosines) against Hugging Face's.
"""
import numpy as np
import pytest
import torch

import ctransformer as ct
from helpers import assert_close
from reference.marian_pairs import N_POSITION, batch, hf_logits, marian_pair
from reference.parity import single_threaded_torch  # noqa: F401 (autouse fixture)

transformers = pytest.importorskip("transformers")

CONFIGS = [
    dict(share=True, tie=True, activation="swish"),
    dict(share=True, tie=True, activation="gelu"),
    dict(share=False, tie=True, activation="swish"),
    dict(share=False, tie=False, activation="gelu"),
    dict(share=False, tie=True, activation="relu"),
    # A distilled student's shape: the encoder and the decoder with their own layers, heads and FFN widths.
    dict(share=True, tie=True, activation="swish", asymmetric=True),
    dict(share=False, tie=False, activation="gelu", asymmetric=True),
    dict(share=False, tie=True, activation="relu", asymmetric=True),
]
# share=True with tie=False is left out: transformers 5 then ties nothing, not even the encoder's and the
# decoder's embeddings to `shared` (three separate tables, one of them unused); no opus-mt model is built so,
# and from_pretrained refuses it.


@pytest.mark.parametrize("options", CONFIGS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_names_and_logits_equal_hugging_faces(options):
    hf, ours, pad = marian_pair(**options)
    theirs = hf.state_dict()
    assert [(k, v.shape) for k, v in ours.state_dict().items()] == [(k, tuple(v.shape)) for k, v in theirs.items()]
    src, dec_in, _ = batch(hf.config.vocab_size, hf.config.decoder_vocab_size, pad)
    with torch.no_grad():
        expected = hf_logits(hf, src, dec_in, pad).numpy()
    got = ours(src, dec_in).numpy().reshape(expected.shape)
    assert_close(got, expected, rtol=1e-5, atol=1e-6, what="logits")
    # The bias is added once: without it the logits differ by exactly final_logits_bias.
    assert np.abs(ours.final_logits_bias.numpy() - hf.final_logits_bias.numpy()).max() == 0


def trained_grads(hf):
    return {n: p for n, p in hf.named_parameters() if p.requires_grad}


def assert_marian_grads_close(ours, reference, rel, floor=1e-6):
    """assert_grads_close's criterion (reference/parity.py) over the trained parameters: Hugging Face lists
    its frozen positional tables among its parameters, ctransformer among its buffers."""
    theirs = trained_grads(reference)
    mine = ours.named_parameters()
    assert [n for n, _ in mine] == list(theirs)
    errors = {n: (float(np.abs(p.grad.numpy() - theirs[n].grad.double().numpy()).max()),
                  float(theirs[n].grad.abs().max())) for n, p in mine}
    scale = max(m for _, m in errors.values())
    for name, (err, mag) in errors.items():
        assert err <= rel * mag + floor * scale, f"{name}: max abs error {err:.3g}, max |grad| {mag:.3g}"


@pytest.mark.parametrize("options", [o for o in CONFIGS if o["activation"] != "relu"],
                         ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_gradients_equal_hugging_faces(options):
    hf, ours, pad = marian_pair(**options)
    src, dec_in, labels = batch(hf.config.vocab_size, hf.config.decoder_vocab_size, pad)
    labels[2, 3:] = pad                     # a padded target: ignored by both losses
    twin = transformers.MarianMTModel(hf.config).double().eval()
    twin.load_state_dict(hf.state_dict())
    for model in (hf, twin):
        logits = hf_logits(model, src, dec_in, pad)
        target = torch.tensor(labels).masked_fill(torch.tensor(labels == pad), -100)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
        loss.backward()
    out = ours(src, dec_in)
    mine = ct.functional.cross_entropy(out, labels.reshape(-1), ignore_index=pad)
    mine.backward()
    assert mine.item() == pytest.approx(loss.item(), rel=1e-6)
    assert_marian_grads_close(ours, hf, rel=1e-4)
    assert_marian_grads_close(ours, twin, rel=1e-5)


@pytest.mark.parametrize("name", ["gelu_erf", "silu"])
def test_smooth_activations_equal_torchs(name):
    """Forward and backward over [-8, 8] and the tails, against torch float64 (our float32 is within a few
    ulps of the exact value: rtol 1e-6, atol 1e-7 of a value of order 1)."""
    x = np.concatenate([np.linspace(-8, 8, 4001), [-30.0, -15.0, 15.0, 30.0]]).astype(np.float32)
    g = np.cos(np.arange(x.size)).astype(np.float32)
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    ref = torch.nn.functional.gelu(t) if name == "gelu_erf" else torch.nn.functional.silu(t)
    ref.backward(torch.tensor(g, dtype=torch.float64))
    xt = ct.tensor(x, requires_grad=True)
    y = getattr(ct.functional, name)(xt)
    y.backward(ct.tensor(g))
    assert_close(y.numpy(), ref.detach().numpy(), rtol=1e-6, atol=1e-7, what=f"{name} forward")
    assert_close(xt.grad.numpy(), t.grad.numpy(), rtol=1e-6, atol=1e-7, what=f"{name} backward")


@pytest.mark.parametrize("d", [16, 15])
def test_positional_table_is_hugging_faces(d):
    """All the sines, then all the cosines; an odd width gives the sines the extra column. Both tables are
    the float64 value rounded to float32 once, so they agree to the rounding of a libm's last bit: half a
    float32 ulp of 1 (6e-8)."""
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding
    theirs = MarianSinusoidalPositionalEmbedding(N_POSITION, d).create_weight().numpy()
    ours = ct.nn.PositionalEncoding(d, N_POSITION, "halves").pos_table.numpy().reshape(theirs.shape)
    assert np.abs(ours - theirs).max() <= 6e-8


def test_the_post_norm_model_keeps_its_names():
    """The Marian options are off in the post-norm Transformer: its state dict is as it was."""
    post = ct.nn.Transformer(10, 10, 0, 0, d_word_vec=8, d_model=8, d_inner=16, n_layers=1, n_head=2, d_k=4, d_v=4)
    assert "trg_word_prj.weight" in post.state_dict() and "final_logits_bias" not in post.state_dict()
    assert post.config.activation == "relu" and post.config.trg_pad_mask and post.config.decoder_start_idx is None


def test_bad_marian_options_raise():
    with pytest.raises(ValueError, match="activation must be"):
        ct.nn.TransformerConfig.marian(vocab=10, pad_idx=9, activation="tanh")
    with pytest.raises(ValueError, match="multiple of n_head"):
        ct.nn.TransformerConfig.marian(vocab=10, pad_idx=9, d_model=10, n_head=4)
    with pytest.raises(ValueError, match="multiple of decoder_n_head"):
        ct.nn.TransformerConfig.marian(vocab=10, pad_idx=9, d_model=8, n_head=4, decoder_n_head=3)
    with pytest.raises(ValueError, match="decoder_d_inner must be positive"):
        ct.nn.TransformerConfig.marian(vocab=10, pad_idx=9, d_model=8, n_head=4, decoder_d_inner=0)
    with pytest.raises(ValueError, match="pad_idx"):
        ct.nn.Transformer(ct.nn.TransformerConfig.marian(vocab=10, pad_idx=10, d_model=8, d_inner=8, n_layers=1,
                                                         n_head=2))
