"""to_ctranslate2 on a Marian model: CTranslate2 decodes it as ctransformer does.

The model is a random Marian model with lively weights (tests/decode/test_marian_generate.py: std 0.3, so the
arg-max moves from token to token) whose pad row is zero, as a trained opus-mt model's is (padding_idx). As
test_export.py does for the post-norm model, float32 both sides:
- score_batch (teacher-forced log-probabilities of a target) equals the log-softmax of ctransformer's forward
  over the vocabulary less the pad (CTranslate2's converter drops it) to LOGPROB_TOL;
- greedy decoding gives the same tokens at every step whose top-1/top-2 gap is above GREEDY_MARGIN (each row
  compared up to its first step within it), with the pad banned on our side (CTranslate2 drops it from the
  vocabulary) and no end forced (CTranslate2 stops at max_decoding_length).
"""
import numpy as np
import pytest
import torch

import ctransformer as ct
from reference.marian_pairs import batch, marian_pair
from test_export import GREEDY_MARGIN, LOGPROB_TOL

ctranslate2 = pytest.importorskip("ctranslate2")
pytest.importorskip("transformers")
from ctransformer.export import to_ctranslate2  # noqa: E402


def tokens(n):
    return ["</s>", "<unk>"] + [f"w{i}" for i in range(2, n - 1)] + ["<pad>"]


@pytest.fixture(scope="module", params=[dict(share=True, tie=True, activation="swish"),
                                        dict(share=False, tie=False, activation="gelu", trg_vocab=50),
                                        dict(share=True, tie=True, activation="swish", asymmetric=True)],
                ids=["shared", "separate", "asymmetric"])
def exported(request, tmp_path_factory):
    hf, ours, pad = marian_pair(**request.param)   # the pad id last on both sides, as opus-mt's
    with torch.no_grad():
        for p in hf.parameters():
            if p.dim() > 1 and p.requires_grad:
                p.normal_(0, 0.3)
        hf.final_logits_bias.mul_(0.1)
        hf.model.encoder.embed_tokens.weight[-1] = 0
        hf.model.decoder.embed_tokens.weight[-1] = 0
    ours.load_state_dict({k: v.numpy() for k, v in hf.state_dict().items()})
    src_tokens, trg_tokens = tokens(hf.config.vocab_size), tokens(hf.config.decoder_vocab_size)
    path = tmp_path_factory.mktemp("ct2_marian")
    to_ctranslate2(ours, path, src_tokens, target_vocabulary=trg_tokens, force=True)
    return ours, pad, ctranslate2.Translator(str(path), device="cpu", intra_threads=1), src_tokens, trg_tokens


def test_scores_equal_ours(exported):
    ours, pad, translator, src_tokens, trg_tokens = exported
    src, dec_in, labels = batch(ours.config.n_src_vocab, ours.config.n_trg_vocab, pad)
    labels[:, -1] = 0                                   # end with </s>, as score_batch's targets do
    dec_in = np.concatenate([np.full((3, 1), pad), labels[:, :-1]], axis=1)
    logits = ours(src, dec_in).numpy().reshape(3, labels.shape[1], -1).astype(np.float64)
    logits[..., pad] = -np.inf                          # CTranslate2's vocabulary has no pad: its softmax skips it
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - logits.max(-1, keepdims=True)
    expected = np.take_along_axis(logp, labels[..., None], -1)[..., 0]
    sources = [[src_tokens[i] for i in row if i != pad] for row in src]
    targets = [[trg_tokens[i] for i in row[:-1]] for row in labels]   # score_batch appends </s> itself
    for r, result in enumerate(translator.score_batch(sources, targets)):
        assert np.abs(np.array(result.log_probs) - expected[r]).max() <= LOGPROB_TOL


def test_greedy_equals_ours(exported):
    ours, pad, translator, src_tokens, trg_tokens = exported
    src, _, _ = batch(ours.config.n_src_vocab, ours.config.n_trg_vocab, pad)
    steps = 10
    ids, logits = ct.decode.greedy_decode(ours, src, ct.nn.get_pad_mask(src, pad), steps + 1, pad, 0,
                                          banned=[pad], return_logits=True)
    sources = [[src_tokens[i] for i in row if i != pad] for row in src]
    results = translator.translate_batch(sources, beam_size=1, max_decoding_length=steps)
    compared = 0
    for r, result in enumerate(results):
        theirs = [trg_tokens.index(t) for t in result.hypotheses[0]] + [0]
        for t in range(1, steps + 1):
            step = logits[r, t - 1].copy()
            step[pad] = -np.inf
            top2 = np.sort(step)[-2:]
            if top2[1] - top2[0] < GREEDY_MARGIN:
                break
            assert ids[r, t] == theirs[t - 1], (r, t, ids[r], theirs)
            compared += 1
            if ids[r, t] == 0:
                break
    assert compared >= 10


def test_marian_export_refuses_what_ct2_cannot_hold(tmp_path):
    hf, ours, pad = marian_pair()
    state = ours.state_dict()
    table = state["model.shared.weight"].copy()
    table[pad] = 1.0
    ours.load_state_dict({"model.shared.weight": table, "model.encoder.embed_tokens.weight": table,
                          "model.decoder.embed_tokens.weight": table, "lm_head.weight": table}, strict=False)
    with pytest.raises(ValueError, match="pad row is not zero"):
        to_ctranslate2(ours, tmp_path / "x", tokens(50))


def test_export_takes_the_tokenizer(tmp_path):
    """An opus-mt-like directory exports with its MarianTokenizer as the vocabulary; CTranslate2 then reads the
    tokenizer's pieces (</s> appended, as the source ids have it) and gives pieces of the target vocabulary."""
    from ctransformer.data.marian_tokenizer import MarianTokenizer
    from marian_dirs import write_marian_dir

    write_marian_dir(tmp_path / "hf")
    model = ct.nn.Transformer.from_pretrained(str(tmp_path / "hf"))
    tok = MarianTokenizer(str(tmp_path / "hf"))
    to_ctranslate2(model, tmp_path / "ct2", tok)
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", intra_threads=1)
    source = tok.pieces("Ein Mann fährt Fahrrad.") + ["</s>"]
    result = translator.translate_batch([source], beam_size=2, max_decoding_length=5)
    assert all(t in tok.target_vocab and t != "<pad>" for t in result[0].hypotheses[0])
