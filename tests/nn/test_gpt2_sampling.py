"""ctransformer.sampling against transformers' generate on random GPT-2 models (test_gpt2_pretrained's gpt2()).

The step from logits to a token is checked in its three parts:
- process_scores: along transformers' own sampled sequences (generate(do_sample=True, output_logits=True,
  output_scores=True)), our processors on its raw logits give its processed scores: the same tokens removed, and the
  kept scores equal exactly (division by the temperature and the penalty are the same float32 operations). A token
  may be kept by one side and removed by the other only where top-p's cumulative probability or min-p's ratio lies
  within TIE of its threshold (two float32 softmaxes differ by a few ulps); as measured, no step here has one;
- probabilities + choose: fed the same uniform numbers, our inverse-CDF pick equals one computed in torch from
  transformers' processed scores, except where a uniform lies within TIE of a cumulative probability;
- greedy with the repetition penalty and no-repeat n-grams equals generate(do_sample=False) token for token along
  the steps whose two best processed scores are KNIFE apart, and each step's log_prob is transformers' (log-softmax
  of its processed scores) to 1e-5.
"""
import json

import numpy as np
import pytest
import torch

import ctransformer as ct
from ctransformer import sampling
from test_gpt2_pretrained import KNIFE, VOCAB, gpt2, ids

transformers = pytest.importorskip("transformers")

TIE = 1e-5   # float32 probabilities of the two libraries differ by ~1e-7 here
EOS = 0      # gpt2()'s eos (and pad): a row may end early on either side, and then takes it as padding

SAMPLING = dict(do_sample=True, temperature=0.7, top_k=20, top_p=0.9, min_p=0.05, repetition_penalty=1.3,
                no_repeat_ngram_size=3)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    hf = gpt2(seed=11)
    with torch.no_grad():   # flatter logits, so top-p and min-p keep several tokens and sampling has a choice
        hf.lm_head.weight.mul_(0.25)
    folder = tmp_path_factory.mktemp("gpt2")
    hf.save_pretrained(folder)
    return hf, ct.nn.GPT.from_pretrained(str(folder)), str(folder)


def hf_generate(hf, prompt, steps, **options):
    torch.manual_seed(0)
    with torch.no_grad():
        out = hf.generate(torch.tensor(prompt), attention_mask=torch.ones(prompt.shape, dtype=torch.long),
                          max_new_tokens=steps, eos_token_id=EOS, pad_token_id=EOS, output_logits=True,
                          output_scores=True, return_dict_in_generate=True, **options)
    return out.sequences.numpy(), [x.numpy() for x in out.logits], [x.numpy() for x in out.scores]


def near_threshold(raw_prefix_scores, options):
    """Per token: whether top-p's or min-p's decision about it lies within TIE of its threshold (our float32 view)."""
    sample_only = sampling.GenerationOptions(**{**options, "top_p": 1.0, "min_p": None})
    before = sampling.process_scores(*raw_prefix_scores, sample_only)
    order = np.argsort(before, axis=-1, kind="stable")
    cumulative = np.cumsum(sampling.probabilities(np.take_along_axis(before, order, -1)), -1)
    near = np.zeros(before.shape, dtype=bool)
    np.put_along_axis(near, order, np.abs(cumulative - (1 - options["top_p"])) < TIE, -1)
    p = sampling.probabilities(before)
    return near | (np.abs(p - options["min_p"] * p.max(-1, keepdims=True)) < TIE)


# Top-k first (then top-p and min-p trim a few); then no top-k, so top-p and min-p alone decide.
CUTS = [SAMPLING, dict(do_sample=True, temperature=0.5, top_k=0, top_p=0.6, min_p=0.2, repetition_penalty=0.8,
                       no_repeat_ngram_size=1)]


@pytest.mark.parametrize("cuts", CUTS, ids=["top-k", "top-p-min-p"])
def test_processed_scores_equal_transformers_along_its_samples(pair, cuts):
    hf, _, _ = pair
    prompt = ids(seed=12, shape=(4, 5))
    steps = 16
    sequences, logits, scores = hf_generate(hf, prompt, steps, **cuts)
    options = sampling.GenerationOptions(**cuts)
    kept = []
    for t in range(steps):
        prefix = sequences[:, :prompt.shape[1] + t]
        ours = sampling.process_scores(prefix, logits[t], options)
        theirs = scores[t]
        differ = np.isfinite(ours) != np.isfinite(theirs)
        assert not (differ & ~near_threshold((prefix, logits[t]), cuts)).any(), f"step {t}"
        both = np.isfinite(ours) & np.isfinite(theirs)
        assert np.array_equal(ours[both], theirs[both]), f"step {t}"
        kept.append(np.isfinite(theirs).sum(-1))
        assert np.isfinite(theirs[np.arange(4), sequences[:, prompt.shape[1] + t]]).all()   # it sampled a kept one
    kept = np.array(kept)
    assert kept.min() >= 1 and kept.max() > 3, "the processors should leave some choice"
    assert kept.max() < (VOCAB if cuts["top_k"] == 0 else cuts["top_k"]), "top-p and min-p should cut something"


def test_the_same_uniforms_pick_the_same_tokens(pair):
    hf, _, _ = pair
    prompt = ids(seed=13, shape=(3, 4))
    sequences, logits, scores = hf_generate(hf, prompt, 8, **SAMPLING)
    options = sampling.GenerationOptions(**SAMPLING)
    rng = np.random.default_rng(0)
    compared = 0
    for t in range(8):
        prefix = sequences[:, :prompt.shape[1] + t]
        probs = sampling.probabilities(sampling.process_scores(prefix, logits[t], options))
        theirs = torch.softmax(torch.tensor(scores[t]), dim=-1).double()
        cumulative = torch.cumsum(theirs, dim=-1)
        for _ in range(50):
            u = rng.random(3)
            picked = sampling.choose(probs, u)
            target = torch.tensor(u) * cumulative[:, -1]
            expected = torch.searchsorted(cumulative, target[:, None], right=True)[:, 0].numpy()
            edge = (np.abs(cumulative.numpy() - target.numpy()[:, None]) < TIE).any(-1)
            assert np.array_equal(picked[~edge], expected[~edge]), f"step {t}, u {u}"
            compared += int((~edge).sum())
    assert compared >= 0.95 * 8 * 50 * 3


def test_greedy_with_penalties_equals_generate(pair):
    hf, model, _ = pair
    prompt = ids(seed=14, shape=(3, 6))
    steps = 20
    options = dict(repetition_penalty=1.5, no_repeat_ngram_size=2)
    theirs, _, scores = hf_generate(hf, prompt, steps, do_sample=False, **options)
    results = list(sampling.generate_tokens(model, prompt, steps, eos_token_id=EOS, **options))
    compared = 0
    for r in range(3):
        row = [x for x in results if x.batch_id == r]
        assert [x.step for x in row] == list(range(len(row))) and row[-1].is_last
        for t, result in enumerate(row):
            top2 = np.sort(scores[t][r])[-2:]
            if top2[1] - top2[0] < KNIFE:
                break
            assert result.token_id == theirs[r, prompt.shape[1] + t], f"row {r}, step {t}"
            expected = torch.log_softmax(torch.tensor(scores[t][r]), -1)[result.token_id].item()
            assert result.log_prob == pytest.approx(expected, abs=1e-5)
            compared += 1
    total = sum(1 for x in results)
    assert compared >= 0.8 * total and total >= 2 * steps, f"only {compared} of {total} tokens off the knife edge"


def test_seeded_sampling_is_reproducible_and_keeps_to_the_kept_tokens(pair):
    _, model, _ = pair
    prompt = ids(seed=15, shape=(2, 4))
    a = sampling.generate(model, prompt, 12, seed=3, **SAMPLING)
    assert np.array_equal(a, sampling.generate(model, prompt, 12, seed=3, **SAMPLING))
    assert not np.array_equal(a, sampling.generate(model, prompt, 12, seed=4, **SAMPLING))
    for result in sampling.generate_tokens(model, prompt, 12, seed=3, **SAMPLING):
        assert np.isfinite(result.log_prob)                   # every pick has a kept (finite) score
    for r in range(2):                                        # no 3-gram twice in a row: no_repeat_ngram_size=3
        grams = [tuple(a[r, i:i + 3]) for i in range(a.shape[1] - 2)]
        assert len(grams) == len(set(grams))


def test_generation_config_defaults_aliases_and_refusals(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps({"do_sample": True, "temperature": 0.8,
                                                                 "eos_token_id": 7, "max_length": 30}))
    options = sampling.GenerationOptions.from_pretrained(str(tmp_path))
    assert options.do_sample and options.top_k == 50 and options.temperature == 0.8 and options.end_ids() == [7]
    assert sampling.GenerationOptions(do_sample=True, top_k=None).top_k == 50          # unset: transformers' 50
    aliased = sampling.GenerationOptions(do_sample=True, sampling_topk=5, sampling_topp=0.5, sampling_temperature=2.0)
    assert (aliased.top_k, aliased.top_p, aliased.temperature) == (5, 0.5, 2.0)
    assert sampling.GenerationOptions.from_pretrained(str(tmp_path), temperature=1.5).temperature == 1.5
    for field, value in (("typical_p", 0.5), ("num_beams", 4), ("bad_words_ids", [[3]])):
        with pytest.raises(ValueError, match=f"{field} = .* is not built"):
            sampling.GenerationOptions.from_pretrained({field: value})
    with pytest.raises(ValueError, match="top_p must be a number in"):
        sampling.GenerationOptions(do_sample=True, top_p=1.5)
    with pytest.raises(ValueError, match="temperature must be a positive"):
        sampling.GenerationOptions(do_sample=True, temperature=0)
    with pytest.raises(TypeError, match="unexpected option 'topk'"):
        sampling.GenerationOptions(topk=3)


def test_bad_prompts_raise(pair):
    _, model, _ = pair
    with pytest.raises(ValueError, match="exceed the model's context"):
        sampling.generate(model, ids(shape=(1, 30)), 20)
    with pytest.raises(ValueError, match="token ids in"):
        sampling.generate(model, np.array([[1, 500]]), 2)
    with pytest.raises(ValueError, match="integer array"):
        sampling.generate(model, np.array([[1.5]]), 2)
    with pytest.raises(ValueError, match="max_new_tokens must be a positive int"):
        sampling.generate(model, ids(shape=(1, 3)), 0)


def test_streamed_text_joins_to_the_decoded_tokens_and_close_stops(pair, tmp_path):
    """Pieces end at word boundaries (each non-final piece is followed by whitespace in the whole text), carry no
    half UTF-8 character, and join to the row's decoded tokens; closing the iterator ends it."""
    import tokenizers

    from ctransformer.gpt2 import GPT2Tokenizer

    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(["Ünïcödé words and more words, über alles."] * 30, vocab_size=300,
                            special_tokens=["<|endoftext|>"], show_progress=False)
    bpe.save_model(str(tmp_path))
    tokenizer = GPT2Tokenizer(str(tmp_path))
    ct.manual_seed(0)   # a fresh GPT over the whole byte-level vocabulary: near-uniform picks of any byte
    model = ct.nn.GPT(vocab_size=len(tokenizer), max_seq_len=64, n_layers=1, d_model=16, n_head=2, d_inner=32).eval()
    prompt = np.array([[5, 6, 7], [8, 9, 10]])
    results = list(sampling.generate_tokens(model, prompt, 60, tokenizer=tokenizer, seed=1, do_sample=True, top_k=0))
    pieces = 0
    for r in range(2):
        row = [x for x in results if x.batch_id == r]
        full = tokenizer.decode([x.token_id for x in row])
        assert "".join(x.text for x in row) == full   # no piece held a character that later bytes changed
        position = 0
        for x in row[:-1]:
            position += len(x.text)
            if x.text:
                assert full[position].isspace()       # a piece ends where a word does
                pieces += 1
        assert row[-1].is_last and not any(x.is_last for x in row[:-1])
    assert pieces >= 2 and "\ufffd" in "".join(x.text for x in results), "the case should have words and half bytes"
    stream = sampling.generate_tokens(model, prompt, 25, tokenizer=tokenizer, seed=1, **SAMPLING)
    assert next(stream).step == 0
    stream.close()
    assert list(stream) == []
