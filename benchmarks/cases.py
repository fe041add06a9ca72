"""The benchmark cases: the same model, weights, batch and optimizer on both sides.

Each case builds a `step` callable per side. `build(side, share)` returns (step, info); with
share=True the torch model is built first and its state dict loaded into ctransformer (same
weights); the memory probes build one side only (share=False), so the ct process never imports torch.
"""
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))  # tests/reference: the PyTorch reference modules


# --- configurations -------------------------------------------------------------------------------
# The post-norm Transformer (SPEC): jadore801120's encoder-decoder model, post-norm, shared embeddings, 'prj'
# scaling.
POST_NORM = {
    "tiny": dict(d_model=32, n_head=4, d_inner=64, n_layers=3, vocab=39, batch=8, length=50),
    "small": dict(d_model=256, n_head=8, d_inner=1024, n_layers=3, vocab=8000, batch=32, length=30),
    "base": dict(d_model=512, n_head=8, d_inner=2048, n_layers=6, vocab=10000, batch=16, length=32),
    # The multi30k task's model and step (tasks/multi30k.py defaults): 4 heads, dropout 0.2, the tied
    # embedding scaled by sqrt(d_model) ('emb'), 8000 subwords, and a batch shaped like the recipe's
    # batches of ~4096 tokens (119 an epoch for 29k pairs: ~244 sentences of ~17 subwords). The tokens
    # are random: the step's time depends on the shapes, not on the words.
    "multi30k": dict(d_model=256, n_head=4, d_inner=1024, n_layers=3, vocab=8000, batch=240, length=17,
                     dropout=0.2, scale_emb_or_prj="emb"),
}
# nanoGPT's CPU Shakespeare-char run: n_layer 4, n_head 4, n_embd 128, block 64, batch 12, dropout 0,
# AdamW(lr 1e-3, betas (0.9, 0.99), weight_decay 0.1), grad clip 1.0, vocab 65 characters.
GPT = dict(vocab=65, block=64, n_layer=4, n_head=4, n_embd=128, batch=12, lr=1e-3, betas=(0.9, 0.99),
           weight_decay=0.1, grad_clip=1.0)
DECODE_STEPS = 50
# The post-norm model's padding id, start symbol and end symbol ("</s>" in the CTranslate2 export's vocabulary).
PAD, BOS, EOS = 0, 1, 2
BEAM, ALPHA = 5, 0.6     # the beam cases: beam width and GNMT length penalty


# --- FLOPs (matmuls only, counted analytically; a multiply-add is 2 FLOPs) ------------------------
def gpt_flops(c):
    n, t, e, f = c["batch"] * c["block"], c["block"], c["n_embd"], 4 * c["n_embd"]
    layer = 4 * 2 * n * e * e + 2 * 2 * n * e * f + 2 * 2 * c["batch"] * t * t * e  # qkv+proj, ffn, qk^T and av
    fwd = c["n_layer"] * layer + 2 * n * e * c["vocab"]
    return {"forward": fwd, "train": 3 * fwd}  # backward: dX and dW, twice the forward


def post_norm_flops(c):
    b, l, e, f, v = c["batch"], c["length"], c["d_model"], c["d_inner"], c["vocab"]
    ns = nt = b * l  # source and target tokens (the target is the full length, as fed to the model)
    enc = 4 * 2 * ns * e * e + 2 * 2 * b * l * l * e + 2 * 2 * ns * e * f
    dec = (4 * 2 * nt * e * e + 2 * 2 * b * l * l * e  # masked self-attention
           + 2 * 2 * nt * e * e + 2 * 2 * ns * e * e + 2 * 2 * b * l * l * e  # cross-attention (q, fc; k, v)
           + 2 * 2 * nt * e * f)
    fwd = c["n_layers"] * (enc + dec) + 2 * nt * e * v
    return {"forward": fwd, "train": 3 * fwd}


def post_norm_gemms(c):
    """The step's Linear products at this configuration (forward, dX, dW), for the sgemm limit."""
    from measure import linear_gemms
    n, e, f, L = c["batch"] * c["length"], c["d_model"], c["d_inner"], c["n_layers"]
    g = []
    g += linear_gemms(n, e, e, count=L * 4 + L * 4 + L * 4)  # enc self (4), dec self (4), dec cross (4)
    g += linear_gemms(n, e, f, count=2 * L) + linear_gemms(n, f, e, count=2 * L)
    g += linear_gemms(n, e, c["vocab"], count=1)
    return g


# --- GPT --------------------------------------------------------------------------------------------
def gpt_batch(c, seed=0):
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, c["vocab"], (c["batch"], c["block"]))
    targets = rng.integers(1, c["vocab"], (c["batch"], c["block"]))
    return idx, targets


# ct.nn.GPT names its sizes as the Transformer does; the torch reference keeps the GPT post's names.
CT_NAMES = {"num_layer": "n_layers", "embed_dim": "d_model", "num_head": "n_head", "feedforward_dim": "d_inner"}


def gpt_args(c):
    return dict(vocab_size=c["vocab"], max_seq_len=c["block"], num_layer=c["n_layer"], embed_dim=c["n_embd"],
                num_head=c["n_head"], feedforward_dim=4 * c["n_embd"], dropout=0.0)


def build_gpt_train(side, share, torch_model=None):
    c = GPT
    idx, targets = gpt_batch(c)
    if side == "torch":
        import torch
        from reference.gpt_reference import GPT as TorchGPT
        torch.manual_seed(0)
        model = TorchGPT(**gpt_args(c))
        opt = torch.optim.AdamW(model.configure_optimizers(c["weight_decay"]), lr=c["lr"], betas=c["betas"])
        ti, tt = torch.from_numpy(idx), torch.from_numpy(targets)

        def step():
            _, loss = model(ti, tt)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), c["grad_clip"])
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss
        return step, model
    import ctransformer as ct
    ct.manual_seed(0)
    model = ct.nn.GPT(**{CT_NAMES.get(k, k): v for k, v in gpt_args(c).items()})
    if share and torch_model is not None:
        model.load_state_dict({k: v.detach().numpy() for k, v in torch_model.state_dict().items()})
    opt = ct.optim.AdamW(model.configure_optimizers(c["weight_decay"]), lr=c["lr"], betas=c["betas"])
    params = model.parameters()

    def step():
        _, loss = model(idx, targets)
        loss.backward()
        ct.optim.clip_grad_norm_(params, c["grad_clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step, model


# --- the post-norm Transformer (jadore801120's) ---------------------------------------------------
# Training: src (b, L), trg (b, L + 1) -> the model sees trg[:, :-1] and predicts trg[:, 1:] (the
# jadore801120's patch_trg); rows end in padding at random lengths in [L/2, L]; dropout 0.1 (the model's
# default), cross_entropy with ignore_index=PAD and label_smoothing=0.1 (mean over real tokens),
# Adam(lr 1e-4, betas (0.9, 0.98), eps 1e-9) as the Annotated Transformer's.
LABEL_SMOOTHING, LR, BETAS, EPS = 0.1, 1e-4, (0.9, 0.98), 1e-9


def post_norm_args(c, dropout=0.1):
    d, h = c["d_model"], c["n_head"]
    return dict(n_src_vocab=c["vocab"], n_trg_vocab=c["vocab"], src_pad_idx=PAD, trg_pad_idx=PAD, d_word_vec=d,
                d_model=d, d_inner=c["d_inner"], n_layers=c["n_layers"], n_head=h, d_k=d // h, d_v=d // h,
                dropout=c.get("dropout", dropout), n_position=200,
                scale_emb_or_prj=c.get("scale_emb_or_prj", "prj"))


def post_norm_batch(c, seed=0, rows=None):
    rng = np.random.default_rng(seed)
    b, L, v = rows or c["batch"], c["length"], c["vocab"]
    src = rng.integers(3, v, (b, L))
    trg = rng.integers(3, v, (b, L + 1))
    trg[:, 0] = BOS
    for r in range(b):  # padded tails
        src[r, rng.integers(L // 2, L + 1):] = PAD
        trg[r, rng.integers(L // 2 + 1, L + 2):] = PAD
    return src, trg


def torch_post_norm(c, dropout=0.1, seed=0):
    import torch
    from reference.post_norm import Transformer as TorchTransformer
    torch.manual_seed(seed)
    return TorchTransformer(**post_norm_args(c, dropout))


def ct_post_norm(c, torch_model=None, dropout=0.1, seed=0):
    import ctransformer as ct
    ct.manual_seed(seed)
    model = ct.nn.Transformer(**post_norm_args(c, dropout))
    if torch_model is not None:  # the same weights
        model.load_state_dict({k: v.detach().numpy() for k, v in torch_model.state_dict().items()})
    return model


def build_post_norm_train(size):
    c = POST_NORM[size]

    def build(side, share, torch_model=None):
        src, trg = post_norm_batch(c)
        trg_in, gold = trg[:, :-1], trg[:, 1:].reshape(-1)
        if side == "torch":
            import torch
            import torch.nn.functional as F
            model = torch_post_norm(c).train()
            opt = torch.optim.Adam(model.parameters(), lr=LR, betas=BETAS, eps=EPS)
            ts, tt, tg = torch.from_numpy(src), torch.from_numpy(trg_in), torch.from_numpy(gold)

            def step():
                logits = model(ts, tt)
                loss = F.cross_entropy(logits, tg, ignore_index=PAD, label_smoothing=LABEL_SMOOTHING)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                return loss
            return step, model
        import ctransformer as ct
        model = ct_post_norm(c, torch_model if share else None).train()
        opt = ct.optim.Adam(model.parameters(), lr=LR, betas=BETAS, eps=EPS)

        def step():
            logits = model(src, trg_in)
            loss = ct.functional.cross_entropy(logits, gold, ignore_index=PAD, label_smoothing=LABEL_SMOOTHING)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss
        return step, model
    return build


def torch_greedy_decode(model, src, src_mask, max_len, start_symbol):
    """The Annotated Transformer's greedy_decode for the post-norm model, batched: encode once, then decode
    the whole prefix at every step and append the arg-max of the last position's logits."""
    import torch
    from reference.post_norm import get_subsequent_mask
    with torch.no_grad():
        memory, *_ = model.encoder(src, src_mask)
        ys = torch.full((src.size(0), 1), start_symbol, dtype=src.dtype)
        for _ in range(max_len - 1):
            out, *_ = model.decoder(ys, get_subsequent_mask(ys), memory, src_mask)
            logits = model.trg_word_prj(out[:, -1])
            if model.scale_prj:
                logits = logits * model.d_model ** -0.5
            ys = torch.cat([ys, logits.argmax(dim=1, keepdim=True)], dim=1)
    return ys


def ct_decoding_model(c, src, torch_model, int8):
    """ct's post-norm model for decoding `src` (torch_model's weights, or its own seeded ones), in eval mode and,
    with int8, quantised (Module.quantize("int8"), as CTranslate2's compute_type="int8"); and src's pad mask."""
    import ctransformer as ct
    model = ct_post_norm(c, torch_model).eval()
    if int8:
        model.quantize("int8")
    return model, ct.nn.get_pad_mask(src, PAD)


def build_post_norm_decode(size, rows, use_cache, steps=DECODE_STEPS, int8=False):
    """int8: ct's model quantised (Module.quantize("int8")), as CTranslate2's compute_type="int8"."""
    c = POST_NORM[size]

    def build(side, share, torch_model=None, steps=steps):
        src, _ = post_norm_batch(c, seed=1, rows=rows)
        if side == "torch":
            import torch
            from reference.post_norm import get_pad_mask
            model = torch_post_norm(c).eval()
            ts = torch.from_numpy(src)
            mask = get_pad_mask(ts, PAD)
            return (lambda: torch_greedy_decode(model, ts, mask, steps + 1, BOS)), model
        import ctransformer as ct
        model, mask = ct_decoding_model(c, src, torch_model if share else None, int8)

        def step():
            with ct.no_grad():
                return ct.decode.greedy_decode(model, src, mask, steps + 1, BOS, use_cache=use_cache)
        return step, model
    return build


def build_post_norm_beam(size, rows, steps=DECODE_STEPS, int8=False):
    """ct's batched beam search (beam BEAM, length penalty ALPHA) for `steps` tokens, float32 or int8; the
    same sources as the greedy cases. No torch side: the blog posts' code has no beam search. CTranslate2
    holds EOS off for `steps` tokens (min_decoding_length); ct cannot, so each call checks that every
    sentence's search ran the full `steps` (its best hypothesis is as long as max_len: a search stopped
    earlier would do less work than CTranslate2's). With random weights no token stands out, and a finished
    hypothesis never beats the live ones' bound (log P falls ~log V a token), so none stops early."""
    c = POST_NORM[size]

    def build(side, share, torch_model=None):
        import ctransformer as ct
        src, _ = post_norm_batch(c, seed=1, rows=rows)
        model, mask = ct_decoding_model(c, src, torch_model if share else None, int8)

        def step():
            with ct.no_grad():
                ids, _ = ct.decode.beam_search(model, src, mask, steps + 1, BOS, EOS, beam_size=BEAM, alpha=ALPHA)
            if (ids[:, -1] == PAD).any():
                raise RuntimeError(f"{size} beam case: a search stopped before {steps} tokens; the timing would "
                                   "not be CTranslate2's work")
            return ids
        return step, model
    return build


def build_post_norm_decode_ct2(size, rows, steps=DECODE_STEPS, threads=2, compute_type="float32", beam=1):
    """CTranslate2 decoding the same sources with the same weights, in a process of its own
    (ct2_process.py): `ct_model` exported by ct.export.to_ctranslate2. EOS is held off for `steps`
    tokens (min_decoding_length), so it runs exactly the steps ct's greedy_decode (or beam search, with
    beam > 1: CTranslate2's length_penalty ALPHA, its exponent on the length) does; None when
    ctranslate2 is not installed. `limit`: seconds one call may take (ct2_process.fastest)."""
    c = POST_NORM[size]

    def build(ct_model, folder, limit=None):
        try:
            import ctranslate2  # noqa: F401
        except ImportError:
            return None
        import ctransformer as ct
        from ct2_process import Call, fastest
        src, _ = post_norm_batch(c, seed=1, rows=rows)
        vocab = ["<pad>", "<s>", "</s>", "<unk>"] + [f"t{i}" for i in range(4, c["vocab"])]
        path = ct.export.to_ctranslate2(ct_model, os.path.join(folder, f"{size}-ct2"), vocab, force=True)
        options = dict(beam_size=beam, min_decoding_length=steps, max_decoding_length=steps, max_batch_size=rows)
        if beam > 1:
            options["length_penalty"] = ALPHA
        source = [[vocab[i] for i in row if i != PAD] for row in src]
        calls = 1 if size == "base" else 3
        return Call(fastest(path, compute_type, threads, source, options, calls=calls, limit=limit), **options)
    return build


def under_autocast(build):
    """The same training case with each side's step under its own bf16 autocast: torch.autocast("cpu",
    dtype=torch.bfloat16) and ct.autocast(dtype="bfloat16"). The whole step runs in the region (as
    ctransformer's training loop does; torch's backward and optimizer step run the same kernels inside it
    as outside, since autocast only changes the forward ops)."""
    def build_bf16(side, share, torch_model=None):
        step, model = build(side, share, torch_model) if side == "ct" else build(side, share)
        if side == "torch":
            import torch

            def run():
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    return step()
        else:
            import ctransformer as ct

            def run():
                with ct.autocast(dtype="bfloat16"):
                    return step()
        return run, model
    return build_bf16


# Each case: build(side, share, torch_model=None) -> (step, model); flops() for training steps;
# decoding cases also time ct's key/value-cached decoder in float32 ("cached") and int8 ("cached_int8")
# against the same torch loop, and CTranslate2 float32 and int8 on the same weights ("ct2", "ct2_int8"),
# each in a process of its own.
CASES = {}
for _size in ("tiny", "small", "base", "multi30k"):
    CASES[f"{_size}/train"] = dict(build=build_post_norm_train(_size),
                                   flops=(lambda s=_size: post_norm_flops(POST_NORM[s])["train"]),
                                   config=POST_NORM[_size], kind="train")
CASES["gpt/train"] = dict(build=build_gpt_train, flops=lambda: gpt_flops(GPT)["train"], config=GPT, kind="train")
# bf16 training (issue 21): each side under its own autocast, with both sides' float32 steps timed in the same
# turns ("fp32": the float32 case's build), so one run gives ct bf16 against ct fp32, torch bf16 and torch fp32.
for _name in ("small/train", "base/train", "multi30k/train", "gpt/train"):
    CASES[_name + "-bf16"] = dict(CASES[_name], build=under_autocast(CASES[_name]["build"]),
                                  fp32=CASES[_name]["build"], kind="train-bf16")
for _size in ("tiny", "small", "base"):
    for _rows in (1, 32):
        CASES[f"{_size}/decode-b{_rows}"] = dict(
            build=build_post_norm_decode(_size, _rows, use_cache=False),
            cached=build_post_norm_decode(_size, _rows, use_cache=True),
            cached_int8=build_post_norm_decode(_size, _rows, use_cache=True, int8=True),
            ct2=build_post_norm_decode_ct2(_size, _rows),
            ct2_int8=build_post_norm_decode_ct2(_size, _rows, compute_type="int8"),
            flops=None, config=POST_NORM[_size], kind="decode", rows=_rows,
            slow=(_size == "base" and _rows == 32))  # ~30 s per torch run: skipped by --quick
# Beam search (issue 22): ct float32 and int8 against CTranslate2 float32 and int8, no torch side.
for _size in ("small", "base"):
    for _rows in (1, 32):
        CASES[f"{_size}/beam{BEAM}-b{_rows}"] = dict(
            build=build_post_norm_beam(_size, _rows), int8=build_post_norm_beam(_size, _rows, int8=True),
            ct2=build_post_norm_decode_ct2(_size, _rows, beam=BEAM),
            ct2_int8=build_post_norm_decode_ct2(_size, _rows, compute_type="int8", beam=BEAM),
            flops=None, config=POST_NORM[_size], kind="beam", rows=_rows,
            slow=(_size == "base" and _rows == 32))  # seconds a call for every engine: skipped by --quick
