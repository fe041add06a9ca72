"""ctransformer.export.to_ctranslate2: the post-norm Transformer written as a CTranslate2 model decodes as
ctransformer does.

Two checks on each exported model, float32 both sides:
- greedy decoding (ctranslate2 beam_size=1 against decode.greedy_decode) gives the same tokens, at every step whose
  top-1/top-2 logit gap is far wider than the engines can disagree on (GREEDY_MARGIN);
- ctranslate2's score_batch (teacher-forced log-probabilities of a target) equals the log-softmax of
  ctransformer's forward on the same target, to 2e-5 absolute (the engines sum in other orders).
on random weights (jadore801120's initialisation with embeddings scaled up so that the arg-max moves from
token to token) and on weights trained on the copy task.
A quantised model's export is held to CTranslate2's own int8 quantisation file entry by file entry (model.bin).
"""
import struct

import numpy as np
import pytest

import ctransformer as ct

ctranslate2 = pytest.importorskip("ctranslate2")
from ctransformer.export import to_ctranslate2  # noqa: E402


@pytest.fixture(autouse=True)
def _torch_threads_kept():
    """A CTranslate2 Translator's intra_threads sets the OpenMP thread count that torch reads its own from: torch's is
    put back after each test."""
    import torch

    found = torch.get_num_threads()
    yield
    torch.set_num_threads(found)

LOGPROB_TOL = 2e-5
# A greedy step's token is decided by no knife edge when its top-1/top-2 logit gap is far above what the two
# engines can disagree on: their log-probabilities agree to LOGPROB_TOL, so a gap (the difference of two
# log-probabilities) differs by at most 2 * LOGPROB_TOL = 4e-5 between them; 1e-3 is 25 times that. (Measured along
# ct's greedy paths: smallest gap 2.9e-3 on the random models, 0.76 on the trained copy model.)
GREEDY_MARGIN = 1e-3
# CTranslate2's int8 (compute_type="int8", quantised at load) moves a first-step gap of the trained copy model (the
# top token's log-probability minus any other's) by at most 0.063 against its float32: score_batch over all 11
# tokens of 32 sources, the same to 1e-6 on each of its ISA paths (CT2_FORCE_CPU_ISA unset, GENERIC, AVX, AVX2,
# AVX512); our own int8 model (greedy_decode compute_type="int8") moves it by 0.092. 1.0 is 11 times the larger, so
# a first token whose float32 gap exceeds it is the same under any int8 kernel's rounding. (Measured gaps: 3.4-5.5.)
INT8_FIRST_STEP_MARGIN = 1.0
# The copy task's 11 ids: 0 pad, 1 the start symbol, 2..10 digits; "w10" plays the end token.
COPY_VOCAB = ["<pad>", "<s>", "<unk>"] + [f"w{i}" for i in range(3, 11)]


def _vocab(n):
    return ["<pad>", "<s>", "</s>", "<unk>"] + [f"w{i}" for i in range(4, n)]


def _random_model(vocab_size=40, scale_emb_or_prj="prj", sharing=True, seed=0, **sides):
    ct.manual_seed(seed)
    model = ct.nn.Transformer(vocab_size, vocab_size, 0, 0, d_word_vec=32, d_model=32, d_inner=64, n_layers=2,
                              n_head=4, d_k=8, d_v=8, n_position=64, scale_emb_or_prj=scale_emb_or_prj,
                              trg_emb_prj_weight_sharing=sharing, emb_src_trg_weight_sharing=sharing, **sides)
    # Xavier-initialised weights give logits so close together that every step picks the same token;
    # a unit-normal embedding table and doubled projections make the choice depend on the source.
    rng = np.random.default_rng(seed)
    state = model.state_dict()
    for name, value in state.items():
        if value.ndim == 2 and "emb" not in name and "prj" not in name:
            state[name] = 2.0 * value
    names = ["encoder.src_word_emb.weight", "decoder.trg_word_emb.weight", "trg_word_prj.weight"]
    for i, name in enumerate(names):
        table = rng.normal(0.0, 1.0, size=state[name].shape).astype(np.float32)
        if sharing:
            table = state[names[0]] if i else table
        if "emb" in name:
            table[0] = 0.0  # padding_idx row
        state[name] = table
    assert not model.load_state_dict(state).missing_keys
    model.eval()
    return model


@pytest.fixture(scope="module")
def trained_copy_model():
    from ctransformer.train import train
    cfg = {"steps": 250, "warmup": 100, "log_every": 250, "d_model": 64, "d_inner": 128, "batch_size": 40,
           "eval_batches": 1}
    _, model, _ = train("copy", cfg, progress=False, log=lambda *_: None)
    model.eval()
    return model


def _copy_sources(n, seed):
    rng = np.random.default_rng(seed)
    return np.concatenate([np.ones((n, 1), np.int64), rng.integers(2, 10, size=(n, 9))], axis=1)


def _translator(model, tmp_path, vocab, **kwargs):
    path = to_ctranslate2(model, tmp_path / "ct2", vocab, **kwargs)
    return ctranslate2.Translator(str(path), device="cpu", inter_threads=1, intra_threads=1)


def _top2_gaps(logits):
    """The top-1 minus top-2 logit of each row of the last axis (float64)."""
    top2 = np.sort(np.asarray(logits, dtype=np.float64), axis=-1)[..., -2:]
    return top2[..., 1] - top2[..., 0]


def _ct_greedy(model, src, vocab, max_len, bos, eos, pad=0):
    """Per row: ct's greedy tokens up to its end token, and the top-1/top-2 logit gap of each step that chose one
    (the step choosing the end token included)."""
    mask = ct.nn.get_pad_mask(src, pad)
    ids, logits = ct.decode.greedy_decode(model, src, mask, max_len, bos, eos, return_logits=True)
    out = []
    for row, gaps in zip(np.asarray(ids)[:, 1:], _top2_gaps(logits)):
        tokens = [vocab[i] for i in row]
        n = tokens.index(vocab[eos]) if vocab[eos] in tokens else len(tokens)
        out.append((tokens[:n], gaps[:min(n + 1, len(tokens))]))
    return out


def _assert_same_greedy_tokens(mine, theirs):
    """ctranslate2's greedy tokens are ct's up to the first step of ct's path whose gap is within GREEDY_MARGIN
    (there a legal summation order may pick either token, and the paths may part); every step before it is decided
    by a clear gap (with the same prefix, the engines' gaps differ by < 4e-5). Returns (steps compared, steps)."""
    compared = total = 0
    for (tokens, gaps), other in zip(mine, theirs):
        clear = gaps > GREEDY_MARGIN
        k = len(gaps) if clear.all() else int(np.argmin(clear))
        if k == len(gaps):  # every step clear, the end token's too: the whole output and where it ends
            assert other == tokens, (other, tokens)
        else:
            assert other[:k] == tokens[:k], (k, gaps[k], other, tokens)
        compared, total = compared + k, total + len(gaps)
    return compared, total


def _source_tokens(src, vocab, pad=0):
    return [[vocab[i] for i in row if i != pad] for row in src]


def _assert_same_log_probs(model, translator, src, targets, vocab, bos, pad=0):
    """Teacher-forced log P of each target token (its end token included where it has one)."""
    scored = translator.score_batch(_source_tokens(src, vocab, pad), targets)
    index = {t: i for i, t in enumerate(vocab)}
    for row, target, result in zip(src, targets, scored):
        src_row = row[row != pad][None, :]
        ids = [bos] + [index[t] for t in target]
        logits = np.asarray(model(src_row, np.array([ids])), dtype=np.float64)
        top = logits.max(-1, keepdims=True)
        log_probs = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
        mine = [log_probs[t, ids[t + 1]] for t in range(len(ids) - 1)]
        # ctranslate2 scores the end token after the target as well; compare the target's own tokens.
        np.testing.assert_allclose(result.log_probs[:len(mine)], mine, atol=LOGPROB_TOL, rtol=0)


# Each side its own sizes: 3 encoder layers of 4 heads of 8, 1 decoder layer of 2 heads of 16 and FFN 48 (the
# export writes each side's layers, heads and head size).
ASYMMETRIC = dict(encoder_n_layers=3, decoder_n_layers=1, decoder_n_head=2, decoder_d_k=16, decoder_d_v=16,
                  decoder_d_inner=48)


@pytest.mark.parametrize("scale_emb_or_prj,sharing,sides", [("prj", True, {}), ("emb", True, {}), ("none", False, {}),
                                                             ("emb", True, ASYMMETRIC)],
                         ids=["prj", "emb", "none", "asymmetric"])
def test_random_weights_decode_the_same_tokens(tmp_path, scale_emb_or_prj, sharing, sides):
    vocab = _vocab(40)
    model = _random_model(scale_emb_or_prj=scale_emb_or_prj, sharing=sharing, **sides)
    translator = _translator(model, tmp_path, vocab)
    rng = np.random.default_rng(1)
    src = rng.integers(4, len(vocab), size=(6, 9))
    src[1, 6:] = 0  # a shorter source, padded
    src[4, 3:] = 0
    mine = _ct_greedy(model, src, vocab, max_len=25, bos=1, eos=2)
    theirs = [r.hypotheses[0] for r in translator.translate_batch(_source_tokens(src, vocab), beam_size=1, min_decoding_length=0,
                                                                  max_decoding_length=24)]
    compared, total = _assert_same_greedy_tokens(mine, theirs)
    # Measured: every one of the 6 x 24 steps clears the margin (smallest gap 2.9e-3, in 'none'); most must.
    assert compared >= 0.75 * total, (compared, total)
    tokens = [t for t, _ in mine]
    assert len({tuple(t) for t in tokens}) > 1, "the test model must not give every source one output"
    assert len({t for row in tokens for t in row}) > 2, "nor one token everywhere"
    _assert_same_log_probs(model, translator, src, theirs, vocab, bos=1)


def test_trained_copy_model_decodes_the_same_tokens(tmp_path, trained_copy_model):
    model, vocab = trained_copy_model, COPY_VOCAB
    translator = _translator(model, tmp_path, vocab, eos_token="w10")
    src = _copy_sources(8, seed=2)
    mine = _ct_greedy(model, src, vocab, max_len=12, bos=1, eos=10)
    theirs = [r.hypotheses[0] for r in translator.translate_batch(_source_tokens(src, vocab), beam_size=1, min_decoding_length=0,
                                                                  max_decoding_length=11)]
    compared, total = _assert_same_greedy_tokens(mine, theirs)
    # Measured: every step clears the margin (smallest gap 0.76); most must.
    assert compared >= 0.75 * total, (compared, total)
    # Trained, the model copies most of the digits.
    copied = np.mean([a == b for row, (out, _) in zip(src, mine) for a, b in zip([vocab[i] for i in row[1:]], out)])
    assert copied > 0.5, copied
    _assert_same_log_probs(model, translator, src, theirs, vocab, bos=1)


def test_int8_model_runs_and_mostly_agrees(tmp_path, trained_copy_model):
    # The trained copy model, not a random one: a random model's first-step gaps (0.01-0.9 over 64 sources) are no
    # wider than what int8 moves them by (0.21); the trained model's (3.4-5.5) are over 35 times that.
    model, vocab = trained_copy_model, COPY_VOCAB
    path = to_ctranslate2(model, tmp_path / "ct2", vocab, eos_token="w10")
    float_model = ctranslate2.Translator(str(path), device="cpu", compute_type="float32")
    int8_model = ctranslate2.Translator(str(path), device="cpu", compute_type="int8")
    src = _copy_sources(16, seed=3)
    tokens = _source_tokens(src, vocab)
    a = float_model.translate_batch(tokens, beam_size=1, min_decoding_length=0, max_decoding_length=11)
    b = int8_model.translate_batch(tokens, beam_size=1, min_decoding_length=0, max_decoding_length=11)
    assert all(set(r.hypotheses[0]) <= set(vocab) for r in b)
    # The first token only where float32's first-step gap is wider than int8 can move it (INT8_FIRST_STEP_MARGIN).
    first_logits = np.stack([np.asarray(model(row[None, :], np.array([[1]])))[-1] for row in src])
    clear = _top2_gaps(first_logits) > INT8_FIRST_STEP_MARGIN
    first_a = [r.hypotheses[0][:1] for r, c in zip(a, clear) if c]
    first_b = [r.hypotheses[0][:1] for r, c in zip(b, clear) if c]
    # Measured: all 16 sources clear it, with 8 different first tokens; enough must for the check to mean anything.
    assert clear.sum() >= 8 and len({tuple(t) for t in first_a}) >= 4, (_top2_gaps(first_logits), first_a)
    assert first_a == first_b


def test_refuses_what_it_cannot_express(tmp_path):
    vocab = _vocab(39)
    with pytest.raises(ValueError, match="model.config.layout"):
        to_ctranslate2(ct.nn.Transformer.small_pre_norm(), tmp_path / "a", vocab)
    model = _random_model()
    with pytest.raises(ValueError, match="vocabulary has 39 tokens, the model's vocabulary has 40"):
        to_ctranslate2(model, tmp_path / "b", vocab)
    with pytest.raises(ValueError, match="duplicate"):
        to_ctranslate2(model, tmp_path / "c", ["x"] * 40)
    with pytest.raises(ValueError, match="eos_token '</end>'"):
        to_ctranslate2(model, tmp_path / "d", _vocab(40), eos_token="</end>")
    to_ctranslate2(model, tmp_path / "e", _vocab(40))
    with pytest.raises(RuntimeError, match="already exists"):
        to_ctranslate2(model, tmp_path / "e", _vocab(40))
    to_ctranslate2(model, tmp_path / "e", _vocab(40), force=True)


def _read_model_bin(directory):
    """A CTranslate2 model.bin as ({variable name: array}, {alias: variable name}, (version, spec name, revision)):
    the layout ctranslate2.specs.model_spec.ModelSpec._serialize writes (ctranslate2 has no Python reader)."""
    with open(f"{directory}/model.bin", "rb") as f:
        data = f.read()
    offset = 0

    def take(fmt):
        nonlocal offset
        value, = struct.unpack_from(fmt, data, offset)
        offset += struct.calcsize(fmt)
        return value

    def string():
        nonlocal offset
        n = take("H")  # its length with the terminating NUL
        value = data[offset:offset + n - 1].decode()
        offset += n
        return value

    # DataType's order in ctranslate2 (float32, int8, int16, int32, float16, bfloat16); the last two kept as bits.
    dtypes = [np.float32, np.int8, np.int16, np.int32, np.uint16, np.uint16]
    header = (take("I"), string(), take("I"))
    variables = {}
    for _ in range(take("I")):
        name = string()
        shape = [take("I") for _ in range(take("B"))]
        dtype = dtypes[take("B")]
        size = take("I")
        variables[name] = np.frombuffer(data, dtype=dtype, count=size // np.dtype(dtype).itemsize,
                                        offset=offset).reshape(shape)
        offset += size
    aliases = {}
    for _ in range(take("I")):
        alias = string()
        aliases[alias] = string()
    assert offset == len(data)
    return variables, aliases, header


# Our exported inverse scale is 1 / (our scale [* d_model^-1/2 folded into the output projection]); CTranslate2's is
# 127 / amax of the (folded) float32 weight. The two are at most five float32 roundings apart (amax / 127, the fold,
# the inversion on our side; the fold and 127 / amax on its), each within 2^-24 relative: 6 * 2^-24 bounds their
# difference. Measured: a third of the rows one ulp apart (1.2e-7 relative), the folded projection up to two ulps.
SCALE_RTOL = 6 * 2.0 ** -24
# In quantisation steps, for the folded projection: our q before rounding (w * (127 / amax), two roundings) and
# CTranslate2's (the fold, the folded amax, 127 / it, the product: four) are at most 127.5 * 6 * 2^-24 < 5e-5 apart,
# so an element at least 1e-4 from a half-integer rounds the same way on both sides.
INT8_HALF_MARGIN = 1e-4


@pytest.mark.parametrize("scale_emb_or_prj,sharing", [("prj", True), ("none", False)])
def test_quantised_model_exports_its_own_int8_weights(tmp_path, scale_emb_or_prj, sharing):
    # CTranslate2's int8 rule per row (q = rint(w * (127 / amax))) is ours, so our int8 model written as it is must hold
    # what CTranslate2's own quantisation of the float32 weights writes: the same Linears, their int8 weights bit for
    # bit, their inverse scales within float32 rounding (SCALE_RTOL). Everything else is the float32 export's, bit for
    # bit: LayerNorms, biases, position table, and the embeddings, which CTranslate2's converter writes in int8 and
    # we leave float32 (CTranslate2 quantises them when it loads an int8 model). A wrong scale, a transposed or
    # mis-ordered fused weight shows here.
    # The two models' log-probabilities are not compared: the scales, one float32 rounding apart, feed CTranslate2's
    # on-the-fly int8 quantisation of the activations, where a value on a rounding boundary goes one way or the other,
    # and the flip cascades. Measured, our export against CTranslate2's quantisation (score_batch, max |difference|,
    # 'prj' / 'none'): 7e-7 / 2e-6 with CT2_FORCE_CPU_ISA unset, AVX or AVX2, 1e-6 / 3e-6 on AVX512, but 0.031 / 0.21
    # on GENERIC (what any x86 without AVX runs), as large as int8's own error against float32 there (0.066 / 0.44):
    # no bound holds on every ISA path and still tells a wrong export from rounding. So the files are compared: what
    # the whole-model check stood for (the right weights in the right places, the right scales) is all in them.
    vocab = _vocab(40)
    model = _random_model(scale_emb_or_prj=scale_emb_or_prj, sharing=sharing)
    plain = to_ctranslate2(model, tmp_path / "plain", vocab)
    theirs = to_ctranslate2(model, tmp_path / "theirs", vocab, quantization="int8")
    model.quantize("int8")
    with pytest.raises(ValueError, match="is quantised to int8 and is written with its own"):
        to_ctranslate2(model, tmp_path / "x", vocab, quantization="int8")
    ours = to_ctranslate2(model, tmp_path / "ours", vocab)
    assert ctranslate2.Translator(str(ours), device="cpu").compute_type == "int8_float32"
    (mine, my_aliases, my_header), (its, its_aliases, its_header), (floats, _, _) = (
        _read_model_bin(p) for p in (ours, theirs, plain))
    assert my_header == its_header and my_aliases == its_aliases

    embeddings = {k for k in its if k.split("/")[-2].startswith("embeddings")}
    assert embeddings and all(its[k].dtype == np.int8 for k in embeddings if k.endswith("/weight"))
    assert set(mine) == set(its) - {k for k in embeddings if k.endswith("_scale")}
    linears = sorted(k for k in mine if k + "_scale" in mine)  # (int8 scalars hold the spec's flags)
    # 2 encoder layers of 4 Linears (fused qkv, out, ffn 0 and 1), 2 decoder layers of 7, the output projection.
    assert len(linears) == 2 * 4 + 2 * 7 + 1 and "decoder/projection/weight" in linears
    for name in set(mine) - set(linears) - {k + "_scale" for k in linears}:
        assert mine[name].dtype == floats[name].dtype and mine[name].shape == floats[name].shape, name
        assert mine[name].tobytes() == floats[name].tobytes(), name

    for name in linears:
        q, its_q = mine[name], its[name]
        assert q.dtype == its_q.dtype == np.int8 and q.shape == its_q.shape, name
        scale, its_scale = mine[name + "_scale"], its[name + "_scale"]
        assert scale.dtype == np.float32 and scale.shape == its_scale.shape == q.shape[:1], name
        np.testing.assert_allclose(scale, its_scale, rtol=SCALE_RTOL, atol=0, err_msg=name)
        if name == "decoder/projection/weight" and scale_emb_or_prj == "prj":
            # We quantise the weight before the d_model^-1/2 fold, CTranslate2 after it: the same q except where
            # its q before rounding (float32 folded weight times its scale, as it computes it) is on a half-integer.
            exact = np.abs(floats[name] * its_scale[:, None])
            edge = np.abs(exact - np.floor(exact) - 0.5) < INT8_HALF_MARGIN
            assert np.array_equal(q[~edge], its_q[~edge]), name
            assert np.abs(q[edge].astype(np.int32) - its_q[edge]).max(initial=0) <= 1, name
        else:  # the same float32 operations on the same float32 weights: the same int8, bit for bit
            assert np.array_equal(q, its_q), name
