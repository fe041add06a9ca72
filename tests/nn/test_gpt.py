"""ctransformer.nn.gpt.GPT against a PyTorch implementation of the GPT (decoder-only, nanoGPT-style)
as its blog post writes it (tests/reference/gpt_reference.py; seeds/004_09708f5e1787a8f3.txt).

Tolerances (float32 on both sides, same weights, dropout 0):
- logits: |d| <= 1e-5 + 1e-5 |x|; attention weights: |d| <= 1e-6; loss: relative 1e-6;
- gradients: |d| <= 1e-4 |g| + 1e-6 max|g| (max over every parameter's gradient): the
  k_layer biases have a gradient that is exactly 0 in exact arithmetic (softmax ignores a shift
  common to a row), so both sides hold rounding noise of ~1e-11 there.
"""
import math

import numpy as np
import pytest
import torch

import ctransformer as ct
from helpers import assert_close, assert_releases_gil
from reference.gpt_pairs import BIG, SMALL, ct_config, make_pair, prompts
from reference.gpt_reference import GPT as TorchGPT
from reference.gpt_reference import greedy

def batch(cfg, b, t, seed=1):
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, cfg["vocab_size"], (b, t))
    targets = rng.integers(1, cfg["vocab_size"], (b, t))
    targets[:, ::3] = 0  # ignore_index=0: these positions do not count
    targets[0, 1] = 0
    return idx, targets


def check_parity(tm, cm, idx, targets):
    logits, attns = cm(idx)
    t_logits, t_attns = tm(torch.from_numpy(idx))
    assert_close(logits, t_logits, rtol=1e-5, atol=1e-5, what="logits")
    assert len(attns) == len(t_attns) == len(tm.transformer)
    for layer, (a, ta) in enumerate(zip(attns, t_attns)):
        assert_close(a, ta, rtol=0, atol=1e-6, what=f"attention weights of layer {layer}")

    logits, loss = cm(idx, targets)
    t_logits, t_loss = tm(torch.from_numpy(idx), torch.from_numpy(targets))
    assert_close(logits, t_logits, rtol=1e-5, atol=1e-5, what="logits (with targets)")
    assert loss.shape == () and math.isfinite(loss.item())
    assert loss.item() == pytest.approx(t_loss.item(), rel=1e-6)
    loss.backward()
    t_loss.backward()

    t_params = dict(tm.named_parameters())
    c_params = dict(cm.named_parameters())
    assert list(c_params) == list(t_params)  # the tied weight once, under word_token_embedding.weight
    g_max = max(p.grad.abs().max().item() for p in t_params.values() if p.grad is not None)
    for name, tp in t_params.items():
        cg = c_params[name].grad
        if tp.grad is None:  # e.g. word_pos_embedding with no_pos: never used
            assert cg is None, f"{name}: torch has no gradient, ctransformer has one"
            continue
        assert cg is not None, f"{name}: no gradient"
        assert_close(cg, tp.grad, rtol=1e-4, atol=1e-6 * g_max, what=f"grad of {name}")


@pytest.mark.parametrize("direction", ["torch->ct", "ct->torch"])
@pytest.mark.parametrize("cfg,b,t", [(SMALL, 3, 12), (BIG, 2, 64)], ids=["small", "big"])
def test_matches_torch(cfg, b, t, direction):
    tm, cm = make_pair(cfg, direction=direction)
    check_parity(tm, cm, *batch(cfg, b, t))


@pytest.mark.parametrize("flags", [{}, {"no_res": True}, {"no_pos": True}, {"no_res": True, "no_pos": True}],
                         ids=["default", "no_res", "no_pos", "no_res+no_pos"])
def test_matches_torch_sharp_weights_and_variants(flags):
    tm, cm = make_pair(SMALL, sharp=True, **flags)
    assert cm.no_res == flags.get("no_res", False) and cm.no_pos == flags.get("no_pos", False)
    check_parity(tm, cm, *batch(SMALL, 3, SMALL["max_seq_len"]))


def test_no_pos_ignores_positions_and_no_res_changes_output():
    idx = np.array([[5, 6, 7, 8]])
    for no_pos in (False, True):
        _, cm = make_pair(SMALL, sharp=True, no_pos=no_pos)
        before = cm(idx)[0].numpy().copy()
        cm.word_pos_embedding.weight.numpy()[:] *= -1.0
        moved = np.abs(cm(idx)[0].numpy() - before).max()
        assert (moved == 0.0) if no_pos else (moved > 1e-3), f"no_pos={no_pos}: logits moved by {moved}"
    _, plain = make_pair(SMALL, sharp=True)
    _, no_res = make_pair(SMALL, sharp=True, no_res=True)
    assert np.abs(plain(idx)[0].numpy() - no_res(idx)[0].numpy()).max() > 1e-3


def test_attention_is_causal():
    _, cm = make_pair(SMALL, sharp=True)
    _, attns = cm(np.arange(10).reshape(1, 10))
    for a in attns:
        a = a.numpy()
        assert a.shape == (1, SMALL["num_head"], 10, 10)
        assert np.all(np.triu(np.ones((10, 10)), 1)[None, None] * a == 0)
        assert_close(a.sum(-1), np.ones((1, SMALL["num_head"], 10)), rtol=0, atol=1e-6, what="rows sum to 1")


def test_names_order_tying_and_parameter_count():
    tm, cm = make_pair(SMALL)
    assert list(cm.state_dict()) == list(tm.state_dict())
    assert [n for n, _ in cm.named_parameters()] == [n for n, _ in tm.named_parameters()]
    assert cm.num_parameters() == sum(p.numel() for p in tm.parameters())
    big_t, big_c = TorchGPT(**BIG, dropout=0.0), ct.nn.GPT(**ct_config(BIG), dropout=0.0)
    assert big_c.num_parameters() == sum(p.numel() for p in big_t.parameters())
    # One tensor behind both names: writing through one is seen through the other.
    head, emb = cm.language_model_head.weight, cm.word_token_embedding.weight
    assert head.numpy().__array_interface__["data"][0] == emb.numpy().__array_interface__["data"][0]
    assert cm.language_model_head.bias is None
    head.numpy()[3, 4] = 7.0
    assert emb.numpy()[3, 4] == 7.0
    assert cm.state_dict()["word_token_embedding.weight"][3, 4] == 7.0
    assert ct.nn.GPT is ct.nn.gpt.GPT
    assert isinstance(cm.transformer[1], ct.nn.gpt.TransformerLayer) and len(cm.transformer) == 2
    assert [type(layer).__name__ for layer in cm.transformer] == ["TransformerLayer"] * 2


def test_tied_gradient_is_sum_of_both_uses():
    tm, cm = make_pair(SMALL, sharp=True)
    idx, targets = batch(SMALL, 2, 8)
    _, loss = cm(idx, targets)
    loss.backward()
    # torch, untied: the embedding and the head as two leaves holding the same values.
    w = tm.word_token_embedding.weight.detach()
    emb_w, head_w = w.clone().requires_grad_(), w.clone().requires_grad_()
    tm.word_token_embedding.weight = torch.nn.Parameter(emb_w)
    tm.language_model_head.weight = torch.nn.Parameter(head_w)
    _, t_loss = tm(torch.from_numpy(idx), torch.from_numpy(targets))
    t_loss.backward()
    total = tm.word_token_embedding.weight.grad + tm.language_model_head.weight.grad
    assert tm.word_token_embedding.weight.grad.abs().max() > 0 and tm.language_model_head.weight.grad.abs().max() > 0
    assert_close(cm.word_token_embedding.weight.grad, total, rtol=1e-4, atol=1e-7, what="tied gradient")


def param_names_by_address(named):
    return {p.numpy().__array_interface__["data"][0]: n for n, p in named}


def test_configure_optimizers_groups_as_the_reference():
    tm, cm = make_pair(dict(SMALL, num_layer=12))  # 12 layers: sorted() puts "transformer.10" before "transformer.2"
    t_names = {id(p): n for n, p in tm.named_parameters()}
    c_names = param_names_by_address(cm.named_parameters())
    t_groups, c_groups = tm.configure_optimizers(0.1), cm.configure_optimizers(0.1)
    assert len(c_groups) == 2 and [g["weight_decay"] for g in c_groups] == [0.1, 0.0]
    assert all(set(g) == {"params", "weight_decay"} for g in c_groups)
    for tg, cg in zip(t_groups, c_groups):
        assert all(isinstance(p, ct.Tensor) for p in cg["params"])
        c_list = [c_names[p.numpy().__array_interface__["data"][0]] for p in cg["params"]]
        assert c_list == [t_names[id(p)] for p in tg["params"]]  # same names, same (sorted) order
    decay = [c_names[p.numpy().__array_interface__["data"][0]] for p in c_groups[0]["params"]]
    no_decay = [c_names[p.numpy().__array_interface__["data"][0]] for p in c_groups[1]["params"]]
    assert "word_token_embedding.weight" in no_decay and "language_model_head.weight" not in decay + no_decay
    assert all(n.endswith("weight") and "norm" not in n and "embedding" not in n for n in decay)
    assert sorted(decay + no_decay) == sorted(c_names.values())  # every parameter exactly once
    assert sum(p.numel() for g in c_groups for p in g["params"]) == cm.num_parameters()


def test_generate_greedy_equals_torch_argmax_loop():
    tm, cm = make_pair(SMALL, sharp=True)
    idx = prompts(SMALL, 2, 5)
    n = 20  # 5 + 20 > max_seq_len = 16: the context gets cropped
    expected, margins = greedy(tm, torch.from_numpy(idx), n)
    assert min(margins) > 1e-3, "near-tie in the reference: the comparison would be fragile"
    out = cm.generate(idx, n, top_k=1)
    assert out.dtype == np.int64 and out.shape == (2, 5 + n)
    np.testing.assert_array_equal(out, expected.numpy())
    np.testing.assert_array_equal(out[:, :5], idx)
    # The reference's generate (top_k=1) agrees, and one sequence comes back squeezed as the reference does.
    np.testing.assert_array_equal(tm.generate(torch.from_numpy(idx[:1]), n, top_k=1), out[0])
    one = cm.generate(idx[:1], n, top_k=1, temperature=0.7)
    assert one.shape == (5 + n,)
    np.testing.assert_array_equal(one, out[0])


def test_generate_sampling_is_reproducible_and_within_top_k():
    tm, cm = make_pair(SMALL, sharp=True)
    idx = prompts(SMALL, 3, 4)
    ct.manual_seed(123)
    a = cm.generate(idx, 15, temperature=0.9, top_k=5)
    ct.manual_seed(123)
    b = cm.generate(idx, 15, temperature=0.9, top_k=5)
    np.testing.assert_array_equal(a, b)
    c = cm.generate(idx, 15, temperature=0.9, top_k=5)
    assert not np.array_equal(a, c)
    # Every sampled id is among the 5 largest logits of the reference for its (cropped) context.
    with torch.no_grad():
        for step in range(4, a.shape[1]):
            ctx = torch.from_numpy(a[:, max(0, step - SMALL["max_seq_len"]):step])
            logits = tm(ctx)[0][:, -1]
            kth = torch.topk(logits, 5).values[:, -1]
            chosen = logits[torch.arange(3), torch.from_numpy(a[:, step])]
            assert torch.all(chosen >= kth - 1e-5), f"step {step}: an id outside the top 5"


@pytest.mark.parametrize("temperature,top_k", [(1.0, None), (2.0, None), (1.5, 6)])
def test_generate_samples_the_right_distribution(temperature, top_k):
    """4000 draws of the next id from one prompt: frequencies vs softmax(logits / T) of the reference."""
    tm, cm = make_pair(SMALL, sharp=True)
    prompt = prompts(SMALL, 1, 3)
    ct.manual_seed(5)
    draws = cm.generate(np.repeat(prompt, 4000, axis=0), 1, temperature=temperature, top_k=top_k)[:, -1]
    with torch.no_grad():
        logits = tm(torch.from_numpy(prompt))[0][0, -1] / temperature
        if top_k is not None:
            logits[logits < torch.topk(logits, top_k).values[-1]] = -float("inf")
        probs = torch.softmax(logits, -1).numpy()
    freq = np.bincount(draws, minlength=SMALL["vocab_size"]) / len(draws)
    assert np.all(freq[probs == 0] == 0)
    # Binomial standard deviation <= sqrt(0.25 / 4000) = 0.0079: 4 sigma.
    assert np.abs(freq - probs).max() < 0.032


def test_generate_records_no_graph_and_keeps_grad_mode():
    _, cm = make_pair(SMALL)
    assert ct.is_grad_enabled()
    cm.generate(prompts(SMALL, 1, 3), 2)
    assert ct.is_grad_enabled()
    assert all(p.grad is None for p in cm.parameters())


def test_init_statistics_as_the_reference():
    cfg = dict(vocab_size=2000, max_seq_len=128, num_layer=4, embed_dim=128, num_head=4, feedforward_dim=512)
    ct.manual_seed(0)
    cm = ct.nn.GPT(**ct_config(cfg), dropout=0.1)
    torch.manual_seed(0)
    tm = TorchGPT(**cfg, dropout=0.1)
    proj_std = 0.02 / math.sqrt(2 * cfg["num_layer"])

    def groups(named):
        out = {"proj": [], "linear": [], "embedding": [], "bias": [], "norm_weight": []}
        for name, p in named:
            p = np.asarray(p.detach().numpy() if isinstance(p, torch.Tensor) else p.numpy()).ravel()
            if name.endswith("proj_layer.weight"):
                out["proj"].append(p)
            elif "norm" in name and name.endswith("weight"):
                out["norm_weight"].append(p)
            elif name.endswith("bias"):
                out["bias"].append(p)
            elif "embedding" in name:
                out["embedding"].append(p)
            else:
                out["linear"].append(p)
        return {k: np.concatenate(v) for k, v in out.items()}

    c, t = groups(cm.named_parameters()), groups(tm.named_parameters())
    for key, std in [("linear", 0.02), ("embedding", 0.02), ("proj", proj_std)]:
        assert c[key].std() == pytest.approx(std, rel=0.02), key
        assert c[key].std() == pytest.approx(t[key].std(), rel=0.03), key
        assert abs(c[key].mean()) < 0.05 * std, key
    assert np.all(c["bias"] == 0) and np.all(c["norm_weight"] == 1)
    # Reproducible from the library generator.
    ct.manual_seed(0)
    again = ct.nn.GPT(**ct_config(cfg), dropout=0.1).state_dict()
    for name, value in cm.state_dict().items():
        np.testing.assert_array_equal(value, again[name], err_msg=name)


def test_dropout_train_and_eval():
    tm, cm = make_pair(SMALL, dropout=0.3, sharp=True)
    idx = prompts(SMALL, 2, 10)
    a, b = cm(idx)[0].numpy(), cm(idx)[0].numpy()
    assert not np.allclose(a, b)  # train(): embedding, attention, projection and FFN dropout
    cm.eval()
    tm.eval()
    assert_close(cm(idx)[0], tm(torch.from_numpy(idx))[0], rtol=1e-5, atol=1e-5, what="eval() logits")


def test_modules_standalone():
    layer = ct.nn.gpt.TransformerLayer(16, 2, 32, 0.0)
    x = ct.tensor(np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32))
    out, attn = layer(x)
    assert out.shape == (2, 5, 16) and attn.shape == (2, 2, 5, 5)
    assert [n for n, _ in layer.named_parameters()][:4] == [
        "norm1.weight", "norm1.bias", "attn.q_layer.weight", "attn.q_layer.bias"]
    assert ct.nn.gpt.FFN(16, 32, 0.0)(x).shape == (2, 5, 16)
    assert ct.nn.gpt.SelfAttention(16, 4, 0.0)(x)[1].shape == (2, 4, 5, 5)


@pytest.mark.threads
def test_forward_and_backward_release_the_gil():
    """Forward + backward of the big model let another Python thread run meanwhile (helpers.assert_releases_gil)."""
    _, cm = make_pair(BIG)
    idx = prompts(BIG, 4, 64)

    def work():
        _, loss = cm(idx, idx)
        loss.backward()

    assert_releases_gil(work)


# ---- bad inputs -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_model():
    return ct.nn.GPT(**ct_config(SMALL), dropout=0.0)


@pytest.mark.parametrize("call,error,words", [
    (lambda m: m(np.zeros((2, 4), np.float32)), TypeError, ["word_idx", "integer"]),
    (lambda m: m(np.zeros(4, np.int64)), ValueError, ["word_idx", "(batch, seq_len)"]),
    (lambda m: m(np.zeros((1, 2, 3), np.int64)), ValueError, ["word_idx", "(batch, seq_len)"]),
    (lambda m: m(np.zeros((1, 0), np.int64)), ValueError, ["word_idx"]),
    (lambda m: m(np.zeros((1, 17), np.int64)), ValueError, ["word_idx", "17", "max_seq_len = 16"]),
    (lambda m: m(np.array([[1, 50]])), IndexError, ["word_idx", "50", "(0, 1)", "[0, 50)"]),
    (lambda m: m(np.array([[1, -1]])), IndexError, ["word_idx", "-1"]),
    (lambda m: m(np.ones((2, 4), np.int64), np.ones((2, 3), np.int64)), ValueError, ["targets", "(2, 4)", "(2, 3)"]),
    (lambda m: m(np.ones((2, 4), np.int64), np.full((2, 4), 50)), IndexError, ["targets", "50"]),
    (lambda m: m(np.ones((2, 4), np.int64), np.full((2, 4), -1)), IndexError, ["targets", "-1"]),
    (lambda m: m(np.ones((2, 4), np.int64), np.ones((2, 4), np.float32)), TypeError, ["targets"]),
    (lambda m: m.generate(np.ones((1, 2), np.int64), 3, temperature=0.0), ValueError, ["temperature"]),
    (lambda m: m.generate(np.ones((1, 2), np.int64), 3, top_k=0), ValueError, ["top_k"]),
    (lambda m: m.generate(np.ones((1, 2), np.int64), -1), ValueError, ["max_new_tokens"]),
    (lambda m: m.generate(np.array([[3, 99]]), 1), IndexError, ["idx", "99"]),
    (lambda m: m.generate(np.ones(3, np.int64), 1), ValueError, ["idx", "(batch, seq_len)"]),
    (lambda m: m.generate(np.ones((1, 2), np.float64), 1), TypeError, ["idx"]),
])
def test_bad_inputs(small_model, call, error, words):
    with pytest.raises(error) as info:
        call(small_model)
    for word in words:
        assert word in str(info.value), f"{word!r} not in {info.value}"


def test_bad_config():
    with pytest.raises(ValueError, match="num_head"):
        ct.nn.GPT(50, 16, 2, 30, 4, 64, 0.0)
    with pytest.raises(ValueError, match="Dropout"):
        ct.nn.GPT(50, 16, 2, 32, 4, 64, 1.5)
    with pytest.raises(ValueError, match="vocab_size"):
        ct.nn.GPT(0, 16, 2, 32, 4, 64, 0.0)


def test_long_prompt_is_cropped_in_generate(small_model):
    out = small_model.generate(np.ones((2, 30), np.int64), 2, top_k=3)
    assert out.shape == (2, 32)


def test_gpt_takes_the_transformers_size_names_and_the_older_ones_with_a_warning():
    """n_layers, d_model, n_head, d_inner as ct.nn.Transformer names them; the older names (the GPT post's)
    num_layer, embed_dim, num_head, feedforward_dim still work as keywords, warn, and build the same model
    (issue 36)."""
    import warnings

    ct.manual_seed(3)
    new = ct.nn.GPT(vocab_size=50, max_seq_len=16, n_layers=2, d_model=32, n_head=4, d_inner=64, dropout=0.0)
    ct.manual_seed(3)
    with pytest.warns(FutureWarning, match="num_layer is the older name for n_layers") as caught:
        old = ct.nn.GPT(**SMALL, dropout=0.0)
    assert len(caught) == 4
    for key, value in new.state_dict().items():
        np.testing.assert_array_equal(value, old.state_dict()[key], err_msg=key)
    assert (new.n_layers, new.d_model, new.n_head, new.d_inner) == (2, 32, 4, 64)
    assert (new.num_layer, new.embed_dim, new.num_head, new.feedforward_dim) == (2, 32, 4, 64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ct.nn.GPT(50, 16, 2, 32, 4, 64, 0.0)          # positional, the reference's order: no warning
    with pytest.raises(TypeError, match="got both n_layers and num_layer"):
        ct.nn.GPT(50, 16, 2, 32, 4, 64, 0.0, num_layer=2)
    with pytest.raises(TypeError, match="missing the argument d_inner"):
        ct.nn.GPT(vocab_size=50, max_seq_len=16, n_layers=2, d_model=32, n_head=4, dropout=0.0)
    assert ct.nn.GPT(50, 16, 2, 32, 4, 64).drop.p == 0.0   # nanoGPT's default (GPTConfig.dropout = 0.0)
    with pytest.raises(TypeError, match="dropout must be a number"):
        ct.nn.GPT(50, 16, 2, 32, 4, 64, "0.1")
