"""Issue 12: real translation — corpus reading, subwords, token batches, the multi30k task, translate CLI.

Everything here is small and fast (tiny models, a few hundred subwords, a few hundred pairs); the
hour-long Multi30k run and its BLEU are a script's business (docs/translation.md).
"""
import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import ctransformer as ct
from ctransformer.data.parallel_corpus import CorpusError, multi30k, read_lines, read_parallel
from ctransformer.data.subword import BOS_ID, EOS_ID, PAD_ID, UNK_ID, SubwordVocab, cached_subword_vocab, \
    train_subword_vocab
from ctransformer.data.token_batches import TokenBatcher, make_arrays


# --- corpus reader ------------------------------------------------------------------------------------

def _write(path, lines, gz=False):
    data = ("\n".join(lines) + "\n").encode("utf-8")
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return str(path)


def test_reader_reads_plain_and_gzipped_alike(tmp_path):
    lines = ["Ein Hund läuft.", "  Zwei Männer  ", "Straße"]
    plain = _write(tmp_path / "a.txt", lines)
    packed = _write(tmp_path / "a.txt.gz", lines, gz=True)
    renamed = tmp_path / "b.txt"        # gzip told by its bytes, not its name
    renamed.write_bytes((tmp_path / "a.txt.gz").read_bytes())
    expected = ["Ein Hund läuft.", "Zwei Männer", "Straße"]
    assert read_lines(plain) == read_lines(packed) == read_lines(renamed) == expected


def test_reader_names_both_files_when_counts_differ(tmp_path):
    src = _write(tmp_path / "s.de", ["a", "b", "c"])
    tgt = _write(tmp_path / "t.en", ["a", "b"])
    with pytest.raises(CorpusError, match=r"s\.de has 3 lines but .*t\.en has 2"):
        read_parallel(src, tgt)


def test_reader_errors_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        read_lines(tmp_path / "nope")
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("Stra\xdfe\n".encode("latin-1"))
    with pytest.raises(CorpusError, match="not UTF-8"):
        read_lines(bad)
    cut = tmp_path / "cut.gz"
    _write(cut, ["x" * 1000] * 50, gz=True)
    cut.write_bytes(cut.read_bytes()[:40])
    with pytest.raises(CorpusError, match="cannot be read"):
        read_lines(cut)


def test_multi30k_splits_have_their_documented_sizes():
    sizes = {"train": 29000, "val": 1014, "test2016": 1000}
    for split, n in sizes.items():
        corpus = multi30k(split)
        assert len(corpus) == n and len(corpus.tgt) == n
    first = multi30k("train")
    assert first.src[0] == "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche."
    assert first.tgt[0] == "Two young, White males are outside near many bushes."


# --- subword vocabulary ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_corpus():
    train = multi30k("train")
    return train.src[:400], train.tgt[:400]


@pytest.fixture(scope="module")
def small_vocab(small_corpus):
    src, tgt = small_corpus
    return train_subword_vocab(src + tgt, vocab_size=300)


def test_vocab_special_ids_are_the_models(small_vocab):
    assert (small_vocab.pad_id, small_vocab.unk_id, small_vocab.bos_id, small_vocab.eos_id) == (0, 1, 2, 3)
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    p = small_vocab.processor
    assert [p.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert len(small_vocab) == 300
    ids = small_vocab.encode("Ein Hund.")
    assert min(ids) >= 4       # ordinary text never encodes to a special id
    assert small_vocab.decode([BOS_ID] + ids + [EOS_ID, PAD_ID, PAD_ID]) == "Ein Hund."


def test_vocab_round_trips_the_german_test_set():
    """The full Multi30k recipe (joint BPE of 8000 on train de+en): test2016.de comes back unchanged."""
    train = multi30k("train")
    vocab = train_subword_vocab(train.src + train.tgt, vocab_size=8000)
    test = multi30k("test2016").src
    differences = [(s, vocab.decode(vocab.encode(s))) for s in test if vocab.decode(vocab.encode(s)) != s]
    assert differences == []
    assert UNK_ID not in {i for s in test for i in vocab.encode(s)}  # every test character was seen in training


def test_vocab_encodes_a_list_as_each_sentence_alone(small_corpus, small_vocab):
    """A short list is encoded sentence by sentence (sentencepiece's list call starts threads each time), a long one
    by sentencepiece's list call: ids and pieces are each sentence's own either way, lists and tuples alike."""
    src, _ = small_corpus
    assert len(src) > SubwordVocab._THREADED_FROM
    for texts in (src[:3], tuple(src[:3]), src[:SubwordVocab._THREADED_FROM + 5], []):
        assert small_vocab.encode(texts) == [small_vocab.encode(t) for t in texts]
        assert small_vocab.pieces(texts) == [small_vocab.pieces(t) for t in texts]
    assert small_vocab.encode(src[0]) == small_vocab.processor.encode(src[0], out_type=int)


def test_vocab_names_what_it_cannot_round_trip(small_vocab):
    # A character absent from the training text becomes <unk>: the loss is visible, not silent.
    ids = small_vocab.encode("Ein Hund ☃.")
    assert UNK_ID in ids and small_vocab.decode(ids) != "Ein Hund ☃."


def test_vocab_travels_as_bytes_and_is_cached(tmp_path, small_corpus, small_vocab):
    again = SubwordVocab.from_array(small_vocab.as_array())
    assert again.model_bytes == small_vocab.model_bytes
    src, tgt = small_corpus
    path = str(tmp_path / "run.spm.model")
    first = cached_subword_vocab(src + tgt, path, vocab_size=300)
    mtime = os.stat(path).st_mtime_ns
    second = cached_subword_vocab(src + tgt, path, vocab_size=300)
    assert os.stat(path).st_mtime_ns == mtime and first.model_bytes == second.model_bytes
    assert first.model_bytes == small_vocab.model_bytes          # one thread: the same text gives the same model
    third = cached_subword_vocab(src + tgt, path, vocab_size=200)  # other options: retrained, not reused
    assert len(third) == 200


def test_vocab_bad_input():
    with pytest.raises(ValueError, match="model_type"):
        train_subword_vocab(["a b"], model_type="word")
    with pytest.raises(ValueError, match="vocab_size"):
        train_subword_vocab(["a b"], vocab_size=2)
    with pytest.raises(TypeError, match="bytes"):
        SubwordVocab("not bytes")


# --- token batches ---------------------------------------------------------------------------------------

def _random_pairs(n, seed=0):
    rng = np.random.default_rng(seed)
    src = [list(rng.integers(4, 50, rng.integers(1, 30))) for _ in range(n)]
    tgt = [list(rng.integers(4, 50, rng.integers(1, 30))) for _ in range(n)]
    return src, tgt


def test_every_pair_once_per_epoch_within_the_token_bound():
    src, tgt = _random_pairs(500)
    batcher = TokenBatcher(src, tgt, batch_tokens=200, seed=3)
    for epoch in range(3):
        batches = batcher.epoch(epoch)
        assert len(batches) == len(batcher)
        seen = np.sort(np.concatenate(batches))
        np.testing.assert_array_equal(seen, np.arange(500))
        for b in batches:
            s, t = batcher.arrays(b)
            assert len(b) * max(s.shape[1], t.shape[1] - 1) <= 200
    e0, e1 = batcher.epoch(0), TokenBatcher(src, tgt, 200, seed=3).epoch(1)
    assert any(not np.array_equal(a, b) for a, b in zip(e0, e1))   # reshuffled every epoch


def test_batches_are_full_and_padding_is_low():
    src, tgt = _random_pairs(2000, seed=1)
    batcher = TokenBatcher(src, tgt, batch_tokens=300, seed=0)
    key = batcher.key
    sizes = [len(b) * int(key[b].max()) for b in batcher.epoch(0)]
    assert np.mean(sizes) > 0.9 * 300, np.mean(sizes)
    # Sorting by the longer side leaves only the gap between the two sides' lengths, and within-batch
    # spread of the shorter side, as padding: far below the ~50% of random batches of this data.
    assert batcher.padding_fraction(0) < 0.35
    rng = np.random.default_rng(0)
    random_batches = np.array_split(rng.permutation(2000), len(batcher))
    slots = sum(len(b) * (batcher.src_len[b].max() + batcher.tgt_len[b].max()) for b in random_batches)
    real = batcher.src_len.sum() + batcher.tgt_len.sum()
    assert batcher.padding_fraction(0) < 1 - real / slots


def test_same_seed_same_batches_other_seed_others():
    src, tgt = _random_pairs(300)
    a = TokenBatcher(src, tgt, 150, seed=7)
    b = TokenBatcher(src, tgt, 150, seed=7)
    c = TokenBatcher(src, tgt, 150, seed=8)
    for epoch in (0, 4):
        assert all(np.array_equal(x, y) for x, y in zip(a.epoch(epoch), b.epoch(epoch)))
    assert not all(np.array_equal(x, y) for x, y in zip(a.epoch(0), c.epoch(0)))
    epoch, index, batch = a.at_step(len(a) + 2)
    assert (epoch, index) == (1, 2) and np.array_equal(batch, a.epoch(1)[2])


def test_arrays_add_the_specials():
    src, tgt = make_arrays([[5, 6, 7], [8]], [[9], [10, 11]])
    np.testing.assert_array_equal(src, [[5, 6, 7, EOS_ID], [8, EOS_ID, PAD_ID, PAD_ID]])
    np.testing.assert_array_equal(tgt, [[BOS_ID, 9, EOS_ID, PAD_ID], [BOS_ID, 10, 11, EOS_ID]])


def test_batcher_bad_input():
    src, tgt = _random_pairs(10)
    with pytest.raises(ValueError, match="batch_tokens=5 is below"):
        TokenBatcher(src, tgt, 5, seed=0)
    with pytest.raises(ValueError, match="9 targets"):
        TokenBatcher(src, tgt[:9], 100, seed=0)


# --- the multi30k task on a small corpus made here ----------------------------------------------------------

TINY = {"vocab_size": 300, "d_model": 32, "d_inner": 64, "n_layers": 1, "n_head": 4, "batch_tokens": 600,
        "schedule": "noam", "lr_factor": 0.5, "warmup": 30, "log_every": 10, "val_sentences": 20, "eval_batch_size": 20,
        "beam_size": 2, "max_len_ratio": 1.2, "n_position": 64, "max_len": 60, "average_last": 2,
        "short_run_tokens": 0}


@pytest.fixture(scope="module")
def corpus_files(tmp_path_factory):
    """300 training and 40 validation pairs of Multi30k as the user's own files (plain and gzipped)."""
    folder = tmp_path_factory.mktemp("corpus")
    train, val = multi30k("train"), multi30k("val")
    return {"train_src": _write(folder / "train.de", train.src[:300]),
            "train_tgt": _write(folder / "train.en.gz", train.tgt[:300], gz=True),
            "valid_src": _write(folder / "valid.de.gz", val.src[:40], gz=True),
            "valid_tgt": _write(folder / "valid.en", val.tgt[:40]),
            "folder": folder}


def _tiny(corpus_files, **more):
    return {**TINY, **{k: v for k, v in corpus_files.items() if k != "folder"}, **more}


def _quiet(*_):
    pass


@pytest.fixture(scope="module")
def trained(corpus_files):
    """A tiny model trained 60 steps (about 7 epochs) on the corpus files, with its checkpoint."""
    from ctransformer.train import train

    path = str(corpus_files["folder"] / "run.safetensors")
    task, model, result = train("multi30k", _tiny(corpus_files, steps=60, eval_every=20), checkpoint=path,
                                progress=False, log=_quiet)
    return task, model, result, path


def test_custom_corpus_trains_and_val_loss_falls(trained):
    task, model, result, path = trained
    validated = [h for h in result["history"] if "val_loss" in h]
    assert [h["step"] for h in validated] == [20, 40, 60]
    losses = [h["val_loss"] for h in validated]
    assert losses[0] > losses[1] > losses[2], losses
    assert losses[2] < np.log(300) - 1.0, losses         # well below a uniform guess over 300 subwords
    assert np.isclose(validated[-1]["val_ppl"], np.exp(losses[-1]))
    assert "test_bleu" not in result["evaluation"]      # a custom corpus names no test set here
    assert 0.0 <= result["evaluation"]["val_bleu"] <= 100.0
    assert result["evaluation"]["padding"] < 0.2
    assert all(h["tok/s"] > 0 for h in result["history"][1:])
    assert len(task.vocab) == 300


def test_run_leaves_vocab_best_and_averaged_checkpoints(trained):
    task, model, result, path = trained
    stem = path[: -len(".safetensors")]
    for suffix in (".spm.model", ".best.safetensors", ".averaged.safetensors", ".step40.safetensors",
                   ".step60.safetensors"):
        assert os.path.isfile(stem + suffix), suffix
    assert not os.path.exists(stem + ".step20.safetensors")     # average_last=2 keeps the last two
    assert result["evaluation"]["averaged_checkpoints"] == 2
    with open(stem + ".spm.model", "rb") as f:
        assert f.read() == task.vocab.model_bytes
    from ctransformer.checkpoint import read_checkpoint

    a, _ = read_checkpoint(stem + ".step40.safetensors")
    b, _ = read_checkpoint(stem + ".step60.safetensors")
    avg, _ = read_checkpoint(stem + ".averaged.safetensors")
    key = "model.encoder.layer_stack.0.pos_ffn.w_1.weight"
    np.testing.assert_allclose(avg[key], (a[key].astype(np.float64) + b[key]) / 2, rtol=0, atol=1e-7)
    best = max((h for h in result["history"] if "val_bleu" in h), key=lambda h: h["val_bleu"])
    assert result["best"]["step"] == best["step"]


def test_a_run_stopped_by_its_time_budget_validates_its_last_model(corpus_files, tmp_path):
    """--max-minutes ends the run between validations: the last model is validated all the same, and the
    .best choice sees it (issue 20: a 30-minute run's .best was 27 steps older than its better final model)."""
    from ctransformer.train import train

    path = str(tmp_path / "budget.safetensors")
    task, _, result = train("multi30k", _tiny(corpus_files, steps=60, eval_every=20), checkpoint=path,
                            progress=False, log=_quiet, max_minutes=1e-9)
    assert result["steps"] == 1 and result["stopped_by"].startswith("time budget")
    last = result["history"][-1]
    assert last["step"] == 1 and "val_bleu" in last and "val_loss" in last, result["history"]
    assert result["best"]["step"] == 1
    assert os.path.isfile(path[: -len(".safetensors")] + ".best.safetensors")


def test_budget_plan_counts_steps_and_validations():
    from ctransformer.budget import plan_steps

    # 60 s, 10 of them spent measuring: 50 s buy 100 steps of 0.5 s, less the 2 validations of 5 s = 80
    assert plan_steps(1.0, 0.5, 5.0, lambda steps: [steps // 2, steps], spent_seconds=10.0) == 80
    assert plan_steps(1.0, 0.5, 0.0, lambda steps: [], spent_seconds=0.0) == 120
    # validations every 10 steps: s * 0.5 + (s // 10) * 5 <= 60 -> s = 60
    assert plan_steps(1.0, 0.5, 5.0, lambda steps: list(range(10, steps + 1, 10))) == 60
    assert plan_steps(1e-9, 0.5, 5.0, lambda steps: [steps]) == 1     # at least one step


def test_fitted_schedule_warms_up_peaks_and_anneals_over_the_steps(corpus_files):
    from ctransformer.tasks.multi30k import Multi30k

    task = Multi30k(_tiny(corpus_files, schedule="fitted", steps=200, lr=2e-3, warmup_fraction=0.1,
                          final_lr_fraction=0.05, average_last=4, average_span=0.2))
    model, optimizer, scheduler = task.build()
    lrs = []
    for _ in range(200):
        lrs.append(optimizer.param_groups[0]["lr"])
        scheduler.step()
    assert lrs[0] == pytest.approx(2e-3 / 21) and lrs[19] == pytest.approx(2e-3 * 20 / 21)
    assert lrs[20] == pytest.approx(2e-3) and max(lrs) == lrs[20]
    assert lrs[199] == pytest.approx(1e-4)          # the last step runs at lr * final_lr_fraction
    assert lrs == [task.learning_rate(step) for step in range(200)]      # what a twin in torch is given
    assert all(a >= b for a, b in zip(lrs[20:], lrs[21:]))
    # the last 20% of the run in 4 parts, a kept model at the end of each
    assert task.kept_steps() == [170, 180, 190, 200]
    assert task.validation_steps(200) == [170, 180, 190, 200]
    assert Multi30k(_tiny(corpus_files, schedule="fitted", steps=3, average_last=5)).kept_steps() == [1, 2, 3]


def test_a_short_budget_takes_the_short_run_recipe(corpus_files):
    """The rule a budgeted run picks its recipe by: fewer than short_run_tokens in planned steps x batch_tokens
    -> short_run_batch_tokens (if smaller) and short_run_dropout; short_run_tokens=0 keeps the settings."""
    from ctransformer.tasks.multi30k import Multi30k

    defaults = Multi30k().cfg
    assert defaults["short_run_tokens"] == 2500 * 1024 and defaults["short_run_batch_tokens"] == 512
    assert defaults["short_run_dropout"] == 0.0 and defaults["dropout"] == 0.1
    rule = {"short_run_tokens": 2500 * 1024, "short_run_batch_tokens": 512, "short_run_dropout": 0.0}
    task = Multi30k({**_tiny(corpus_files), "batch_tokens": 1024, "dropout": 0.1, **rule})
    short = {"batch_tokens": 512, "dropout": 0.0}
    assert [task.short_run_config(n) for n in (1, 1850, 2499, 2500, 8000)] == [short, short, short, {}, {}]
    task = Multi30k({**_tiny(corpus_files), "batch_tokens": 4096, "dropout": 0.0, **rule})
    assert [task.short_run_config(n) for n in (624, 625)] == [{"batch_tokens": 512}, {}]
    for keep in ({"short_run_tokens": 0}, {"short_run_batch_tokens": 0, "short_run_dropout": 0.1},
                 {"batch_tokens": 400, "short_run_dropout": 0.1}):
        task = Multi30k({**_tiny(corpus_files), "batch_tokens": 1024, "dropout": 0.1, **rule, **keep})
        assert task.short_run_config(100) == {}


@pytest.mark.parametrize("precision, short", [("fp32", False), ("bf16", False), ("fp32", True)])
def test_a_budgeted_run_is_the_run_of_the_steps_it_planned(corpus_files, tmp_path, precision, short):
    """--max-minutes with the fitted schedule measures its step (and puts back everything the measuring
    steps changed), plans a count, and is then bitwise the --steps run of that count; a resumed run keeps the
    plan from its checkpoint (issue 35). short: the plan buys fewer than short_run_tokens, so the run is
    built again with the short-run recipe (batches of short_run_batch_tokens, short_run_dropout) and planned
    again, and is the --steps run with those settings."""
    from ctransformer.train import train

    rule = {"short_run_tokens": 10**9, "short_run_batch_tokens": 300, "short_run_dropout": 0.0} if short else {}
    cfg = _tiny(corpus_files, schedule="fitted", precision=precision, log_every=1, val_sentences=4, beam_size=1,
                average_last=2, **rule)
    path = str(tmp_path / "budget.safetensors")
    messages = []
    _, _, first = train("multi30k", cfg, checkpoint=path, progress=False, log=messages.append, max_minutes=0.02,
                        max_steps=4)
    plan = first["plan"]
    recipe = {"batch_tokens": 300, "dropout": 0.0} if short else {}
    tokens = recipe.get("batch_tokens", TINY["batch_tokens"])
    assert plan["steps"] > 4 and plan["step_seconds"] > 0 and plan["validations"] == 2, plan
    budgeted = [m for m in messages if m.startswith("time budget of 0.02 min")]
    assert budgeted[-1].endswith(f"planned {plan['steps']} steps of {tokens} tokens"), messages
    if short:
        assert len(budgeted) == 2 and plan["config"] == recipe
        assert plan["first_plan"] == {"steps": plan["first_plan"]["steps"], "batch_tokens": TINY["batch_tokens"],
                                      "dropout": 0.1}
        assert any(m.startswith(f"{plan['first_plan']['steps']} steps of {TINY['batch_tokens']} tokens is a short run")
                   and m.endswith("short-run recipe, batch_tokens=300, dropout=0.0, planned again") for m in messages)
    else:
        assert len(budgeted) == 1 and "first_plan" not in plan and "config" not in plan
    _, model_b, rest = train("multi30k", cfg, checkpoint=path, resume=True, progress=False, log=_quiet)
    assert rest["steps"] == plan["steps"] and rest["plan"] == plan
    _, model_a, straight = train("multi30k", {**cfg, "steps": plan["steps"], **recipe},
                                 checkpoint=str(tmp_path / "a.safetensors"), progress=False, log=_quiet)
    assert "plan" not in straight
    keys = ("step", "loss", "lr", "val_loss")
    assert [h["step"] for h in first["history"]] == [1, 2, 3, 4]
    assert [[h.get(k) for k in keys] for h in rest["history"]] == [[h.get(k) for k in keys] for h in straight["history"]]
    a, b = model_a.state_dict(), model_b.state_dict()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_checkpoint_carries_a_tied_model_and_its_vocab(trained):
    from ctransformer.translator import load_translation_checkpoint

    task, model, _, path = trained
    loaded, vocab, cfg = load_translation_checkpoint(path)
    assert vocab.model_bytes == task.vocab.model_bytes
    # One matrix for source embedding, target embedding and output projection (the post-norm Transformer's two
    # sharings).
    w = loaded.trg_word_prj.weight.numpy()
    assert np.shares_memory(w, loaded.encoder.src_word_emb.weight.numpy())
    assert np.shares_memory(w, loaded.decoder.trg_word_emb.weight.numpy())
    np.testing.assert_array_equal(w, model.trg_word_prj.weight.numpy())
    assert cfg["d_model"] == 32


def test_each_side_its_own_sizes_trains_and_reloads(tmp_path, corpus_files):
    """--set encoder_n_layers=3 decoder_n_layers=1 decoder_n_head=2 decoder_d_inner=48: the model is built so (the
    torch parity of such a model: tests/nn/test_transformer_post_norm.py), the checkpoint's config carries the
    sizes, and the translator's reload is the same model, weight for weight; an older config without the keys
    builds the symmetric model."""
    from ctransformer.train import train
    from ctransformer.translator import build_model, load_translation_checkpoint

    path = str(tmp_path / "asym.safetensors")
    sides = dict(encoder_n_layers=3, decoder_n_layers=1, decoder_n_head=2, decoder_d_inner=48)
    _, model, _ = train("multi30k", _tiny(corpus_files, steps=2, eval_every=0, **sides), checkpoint=path,
                        progress=False, log=_quiet)
    enc, dec = model.config.encoder_side(), model.config.decoder_side()
    assert (enc.n_layers, dec.n_layers, dec.n_head, dec.d_k, dec.d_inner) == (3, 1, 2, 16, 48)
    assert (enc.n_head, enc.d_inner) == (TINY["n_head"], TINY["d_inner"]) and not model.config.symmetric
    loaded, _, cfg = load_translation_checkpoint(path)
    assert {k: cfg[k] for k in sides} == sides
    assert list(loaded.state_dict()) == list(model.state_dict())
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(loaded.state_dict()[key], value, err_msg=key)
    older = {k: v for k, v in cfg.items() if k not in sides}
    assert build_model(older, 300).config.symmetric


def test_resume_equals_never_stopping(tmp_path, corpus_files):
    """12 steps straight == 5 steps, then resume for 7: same losses and weights, bitwise."""
    from ctransformer.train import train

    cfg = _tiny(corpus_files, steps=12, log_every=1, eval_every=6, val_sentences=4, beam_size=1)
    a_path, b_path = str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors")
    _, model_a, result_a = train("multi30k", cfg, checkpoint=a_path, progress=False, log=_quiet)
    train("multi30k", cfg, checkpoint=b_path, progress=False, log=_quiet, max_steps=5)
    _, model_b, result_b = train("multi30k", cfg, checkpoint=b_path, resume=True, progress=False, log=_quiet)
    assert [h["loss"] for h in result_a["history"]] == [h["loss"] for h in result_b["history"]]
    assert [h.get("val_loss") for h in result_a["history"]] == [h.get("val_loss") for h in result_b["history"]]
    a, b = model_a.state_dict(), model_b.state_dict()
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    # The cached vocabulary is only a cache: a resumed run that must retrain it gets the same bytes...
    os.remove(str(tmp_path / "b.spm.model.json"))
    train("multi30k", cfg, checkpoint=b_path, resume=True, progress=False, log=_quiet)
    # ...and one that finds another model of the same size there is refused, not silently remapped.
    from ctransformer.checkpoint import CheckpointError

    corpus = read_parallel(corpus_files["train_src"], corpus_files["train_tgt"])
    other = train_subword_vocab(corpus.src + corpus.tgt, vocab_size=300, model_type="unigram")
    other.save(str(tmp_path / "b.spm.model"))
    with pytest.raises(CheckpointError, match="another subword model"):
        train("multi30k", cfg, checkpoint=b_path, resume=True, progress=False, log=_quiet)


GREEDY_MARGIN = 1e-4


def _agreeing_logits(ids, logits, other_ids, other_logits):
    """The entries of two greedy runs' step logits (greedy_decode's return_logits) that are the same
    function of the same prefix: step t predicts ids[:, t + 1] from ids[:, :t + 1], so it is comparable
    while the runs agree on the tokens before it (and neither row has ended)."""
    steps = min(logits.shape[1], other_logits.shape[1])
    same = ids[:, 1:steps + 1] == other_ids[:, 1:steps + 1]
    prefix = np.concatenate([np.ones((len(ids), 1), bool), np.cumprod(same, axis=1)[:, :-1].astype(bool)], axis=1)
    a, b = logits[:, :steps], other_logits[:, :steps]
    keep = prefix[:, :, None] & np.isfinite(a) & np.isfinite(b)
    return a[keep], b[keep]


def test_beam_one_is_greedy_on_the_trained_model(trained):
    """Beam search of width 1 keeps each step's largest logit (ties: the smaller id), as greedy decoding's
    first maximum does. The two reach their logits through different float32 products (the Translator keeps
    packed weight copies across its batches, greedy_decode packs afresh in each call), so a step whose top
    two logits are within rounding of each other may go either way, legally. The tokens are compared along
    greedy's path up to its first step whose top-1/top-2 gap is below GREEDY_MARGIN = 1e-4; after such a
    step the two paths may part. The margin is proven against the measured spread on every run: the same
    greedy decoding through two other legal float32 orders (the uncached full-prefix loop, and the packed
    kernel from the first product) moves these logits by at most GREEDY_MARGIN / 10 (seen 1.4e-6, so ~70x
    inside the margin). Seen: the smallest gap along the path is 1.1e-3, every step of the 12 sentences
    is compared; at least 90% of the steps must be."""
    from ctransformer.translator import Translator

    task, model, _, _ = trained
    model.eval()
    sentences = task.valid_corpus.src[:12]
    translator = Translator(model, task.vocab, beam_size=1, batch_size=5, max_len_ratio=1.2)
    ids = translator.encode(sentences)
    beam = translator.translate_ids(ids)
    # Greedy decoding of the same batches (the translator sorts by length, 5 a batch; a batch's
    # longest source sets its length limit).
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    spread, smallest_gap, steps, compared = 0.0, np.inf, 0, 0
    for start in range(0, len(order), 5):
        rows = order[start:start + 5]
        src, _ = make_arrays([ids[i] for i in rows], None)
        args = (model, src, ct.nn.get_pad_mask(src, PAD_ID), translator.max_len(src.shape[1]), BOS_ID)
        greedy, logits = ct.decode.greedy_decode(*args, end_symbol=EOS_ID, return_logits=True)
        uncached = ct.decode.greedy_decode(*args, end_symbol=EOS_ID, return_logits=True, use_cache=False)
        with ct.decode.PackedWeights():
            ct.decode.greedy_decode(*args, end_symbol=EOS_ID)       # packs the weights: the next call reads them
            packed = ct.decode.greedy_decode(*args, end_symbol=EOS_ID, return_logits=True)
        for other in (uncached, packed):
            a, b = _agreeing_logits(greedy, logits, *other)
            assert a.size > 0
            spread = max(spread, float(np.abs(a - b).max()))
        for r, i in enumerate(rows):
            y = greedy[r, 1:]
            end = np.flatnonzero((y == EOS_ID) | (y == PAD_ID))
            n = int(end[0]) + 1 if len(end) else len(y)     # the steps taken, the one giving </s> included
            top = np.sort(logits[r, :n], axis=-1)
            gaps = top[:, -1] - top[:, -2]
            smallest_gap = min(smallest_gap, float(gaps.min()))
            thin = np.flatnonzero(gaps < GREEDY_MARGIN)
            clear = int(thin[0]) if len(thin) else n        # steps 0 .. clear - 1 decided beyond rounding
            steps += n
            compared += clear
            if clear == n:                                  # the whole path: the same tokens and the same end
                assert beam[i] == (y[:end[0]] if len(end) else y).tolist(), (i, smallest_gap)
            else:
                assert beam[i][:clear] == y[:clear].tolist(), (i, clear, gaps[clear])
    assert spread <= GREEDY_MARGIN / 10, f"greedy logits move by {spread:.3g} between float32 orders"
    assert compared >= 0.9 * steps, f"only {compared} of {steps} greedy steps clear the margin " \
                                    f"(smallest gap {smallest_gap:.3g})"
    assert any(len(out) > 3 for out in beam)       # it says something, not just end-of-sentence


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_beam_score_is_the_length_penalised_log_probability(trained, alpha):
    """score = log P(y | x) / ((5 + |y|) / 6) ** alpha, log P from the model's own full forward pass."""
    task, model, _, _ = trained
    model.eval()
    ids = [s[:30] for s in task.vocab.encode(task.valid_corpus.src[:6])]
    src, _ = make_arrays(ids, None)
    hyps, scores = ct.decode.beam_search(model, src, ct.nn.get_pad_mask(src, PAD_ID), 30, BOS_ID, EOS_ID,
                                         beam_size=3, alpha=alpha)
    for r in range(len(ids)):
        y = hyps[r, 1:]
        length = int(np.flatnonzero(y == EOS_ID)[0]) + 1 if (y == EOS_ID).any() else len(y)
        y = y[:length]                                        # the tokens after <s>, </s> included
        one, _ = make_arrays([ids[r]], None)
        logits = model(one, np.concatenate([[BOS_ID], y[:-1]])[None]).numpy().astype(np.float64)
        logp = logits - logits.max(-1, keepdims=True)
        logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
        total = logp[np.arange(length), y].sum()
        assert scores[r] == pytest.approx(total / ct.decode.length_penalty(length, alpha), abs=2e-4)


def test_translate_cli_stdin_to_stdout_with_bleu(trained, corpus_files):
    task, _, _, path = trained
    # An empty line and a too-long one; no line has spaces at its ends, which the CLI strips from stdin.
    sentences = task.valid_corpus.src[:6] + ["", " ".join(["Ein Hund"] * 40)]
    assert all(s == s.strip() for s in sentences)
    ref = corpus_files["folder"] / "ref.en"
    ref.write_text("\n".join(task.valid_corpus.tgt[:6] + ["", "A dog"]) + "\n")
    threads = ct.get_num_threads()
    run = subprocess.run([sys.executable, "-m", "ctransformer.translate", "--checkpoint", path, "--beam-size", "2",
                          "--batch-size", "3", "--threads", str(threads), "--bleu", str(ref)],
                         input="\n".join(sentences) + "\n", capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    out = run.stdout.split("\n")[:-1]
    assert len(out) == 8 and out[6] == ""
    assert "line 8 has 80 subwords" in run.stderr and "truncated" in run.stderr    # n_position 64
    assert "BLEU = " in run.stderr and "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in run.stderr
    # The CLI's own computation in-process: the same checkpoint, beam 2, the checkpoint's length penalty and
    # length ratio, batches of 3 (so the same batches, each with its own length limit, row count and product
    # kernels: packed weight copies from the second product on), the same thread count and compute type.
    # Equal by construction, so compared exactly: beam decisions are argmaxes, and a 60-step model's logits
    # leave no margin to compare two different float32 computations by.
    from ctransformer.translator import Translator, load_translation_checkpoint

    model, vocab, cfg = load_translation_checkpoint(path)
    translator = Translator(model, vocab, beam_size=2, length_penalty=cfg["length_penalty"],
                            max_len_ratio=cfg["max_len_ratio"], batch_size=3, warn=_quiet)
    assert ct.get_num_threads() == threads
    with ct.decode.using_compute_type(model, "default"):
        expected = translator.translate(sentences)
    assert out == expected


def test_translate_cli_files_and_errors(trained, tmp_path):
    task, _, _, path = trained
    source = _write(tmp_path / "in.de.gz", task.valid_corpus.src[:3], gz=True)
    target = tmp_path / "out.en"
    run = subprocess.run([sys.executable, "-m", "ctransformer.translate", "--checkpoint", path, "--input", source,
                          "--output", str(target), "--beam-size", "1"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert len(target.read_text().split("\n")) == 4
    run = subprocess.run([sys.executable, "-m", "ctransformer.translate", "--checkpoint", source],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "not a readable safetensors file" in run.stderr
    latin1 = subprocess.run([sys.executable, "-m", "ctransformer.translate", "--checkpoint", path],
                            input="Stra\xdfe\n".encode("latin-1"), capture_output=True, timeout=120)
    assert latin1.returncode == 2 and b"not UTF-8" in latin1.stderr
    short = _write(tmp_path / "short.en", ["x"])
    run = subprocess.run([sys.executable, "-m", "ctransformer.translate", "--checkpoint", path, "--input", source,
                          "--bleu", short], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "has 1 lines but the input has 3" in run.stderr


def test_quantised_checkpoint_translates_as_the_quantised_model(trained, tmp_path):
    # quantize_checkpoint writes the model's Linears in int8; reading it back gives the int8 model, whose
    # translations equal the float32 checkpoint's under --compute-type int8 (the same int8 weights either way).
    from ctransformer.checkpoint import read_checkpoint
    from ctransformer.translator import Translator, load_translation_checkpoint, quantize_checkpoint

    task, _, _, path = trained
    quantised = str(tmp_path / "int8.safetensors")
    quantize_checkpoint(path, quantised)
    tensors, metadata = read_checkpoint(quantised)
    assert metadata["quantization"] == "int8"
    assert tensors["model.encoder.layer_stack.0.pos_ffn.w_1.weight"].dtype == np.int8
    assert tensors["model.trg_word_prj.weight"].dtype == np.float32        # tied to the embedding
    model, vocab, cfg = load_translation_checkpoint(quantised)
    assert model.quantization == "int8"
    sentences = task.valid_corpus.src[:5]
    ours = Translator(model, vocab, beam_size=2, warn=_quiet).translate(sentences)
    run = subprocess.run([sys.executable, "-m", "ctransformer.translate", "--checkpoint", path, "--beam-size", "2",
                          "--compute-type", "int8"], input="\n".join(sentences) + "\n", capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[:-1] == ours
    clash = subprocess.run([sys.executable, "-m", "ctransformer.translate", "--checkpoint", path, "--precision", "bf16",
                            "--compute-type", "int8"], input="x\n", capture_output=True, text=True, timeout=120)
    assert clash.returncode == 2 and "disagree" in clash.stderr
    # The same file from the command line (--save-quantized), and a clear error for a checkpoint that is not one.
    from_cli = str(tmp_path / "int8_cli.safetensors")
    run = subprocess.run([sys.executable, "-m", "ctransformer.translate", "--checkpoint", path, "--save-quantized",
                          from_cli], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "quantised to int8" in run.stderr, run.stderr
    again, again_metadata = read_checkpoint(from_cli)
    assert again_metadata["quantization"] == "int8" and again.keys() == tensors.keys()
    for name in tensors:
        np.testing.assert_array_equal(again[name], tensors[name], err_msg=name)
    bad = subprocess.run([sys.executable, "-m", "ctransformer.translate", "--checkpoint", str(tmp_path / "missing"),
                          "--save-quantized", str(tmp_path / "never.safetensors")], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "error" in bad.stderr and not (tmp_path / "never.safetensors").exists()


def test_train_cli_runs_multi30k_on_a_named_corpus(tmp_path, corpus_files):
    args = [sys.executable, "-m", "ctransformer.train", "multi30k", "--epochs", "1", "--seed", "1", "--no-progress",
            "--checkpoint", str(tmp_path / "m.safetensors"), "--json", str(tmp_path / "r.json")]
    args += ["--set"] + [f"{key}={value}" for key, value in _tiny(corpus_files, val_sentences=3, average_last=0).items()]
    run = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "val BLEU" in run.stdout
    assert "padding" in run.stdout and "training pairs (0 with an empty side and" in run.stdout
    batches = int(run.stdout.split(" batches of <= 600 tokens")[0].split()[-1])
    assert f"trained {batches} steps" in run.stdout                  # --epochs 1: one pass over the batches
    assert json.loads((tmp_path / "r.json").read_text())["steps"] == batches
    missing = subprocess.run([sys.executable, "-m", "ctransformer.train", "multi30k", "--set", "train_src=nope.de",
                              "--set", "train_tgt=nope.en"], capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "no file at 'nope.de'" in missing.stderr and "Traceback" not in missing.stderr
    misplaced = subprocess.run([sys.executable, "-m", "ctransformer.train", "--set", "seed=1", "multi30k"],
                               capture_output=True, text=True, timeout=120)
    assert misplaced.returncode == 2 and "name the task before --set" in misplaced.stderr


def test_task_option_errors(corpus_files):
    from ctransformer.train import train

    with pytest.raises(ValueError, match="train_src and train_tgt go together"):
        train("multi30k", {**TINY, "train_src": corpus_files["train_src"]}, progress=False, log=_quiet)
    with pytest.raises(ValueError, match="n_position"):
        train("multi30k", _tiny(corpus_files, max_len=80), progress=False, log=_quiet)


def test_a_training_step_equals_torch(corpus_files, tmp_path):
    """The task's recipe on one batch against the post-norm reference with the same (tied) weights, dropout
    off: the label-smoothed loss (torch's cross_entropy(label_smoothing=0.1, ignore_index=pad)), ct's
    gradients, and the weights after one Adam(0.9, 0.98, 1e-9) step at the Noam rate, three steps in a row
    (rates 5.4e-4, 5.4e-4 (step 0 counts as 1), 1.1e-3), each optimizer's moments carried from step to step.

    Knife edges, handled before each step (DEVELOPING.md, "Parity tests and ReLU knife edges"):
    - ReLU: clear_relu_knife_edges shifts the biases of the w_1 units whose input comes within RELU_MARGIN of
      zero on the step's batch (seen 9, 12 and 14 units) in torch, and ct is given torch's weights, so both
      start every step from the same weights (what one step set aside below does not reach the next step's
      gradients) and no legal summation order flips a unit (assert_relu_margins proves it).
    - the sign of a gradient: Adam's first steps move a weight by about the rate in the direction of its
      gradient, whatever the gradient's size, so a gradient that is zero in exact arithmetic, or within float32
      noise of zero, has an update of noise (up to 2 rates apart between the libraries). The float64 twin
      tells them apart: per tensor, `noise` is the largest |float32 - float64| of either library's gradient
      (seen 9e-10 to 5.4e-8, at this step or an earlier one). A weight whose exact gradient is at least 1000
      noise (so >= ~1e-6, far above eps) has its update decided to ~1e-3 of the rate (Adam's step is a ratio
      of gradients: its error ~ rate * noise / |g|) and is held to 1e-5 absolute (seen <= 6e-8). The rest
      (seen 1.4-1.9%, dead ReLU units' weights among them) are held to 2.01 rates: Adam's largest step (1.0024
      rates at step 3) taken in opposite directions. At most 10% of a step's weights may be set aside: an
      error in ct's gradients would raise `noise` and set aside the weights it spoils; that cap, and ct's
      gradients held to rel 1e-5 of float64's (assert_grads_close, as in the parity tests), keep it from hiding.
    Loss rel 1e-5. A wrong rate, moment or tie moves the decided weights by a good part of a rate (>= 5.4e-4),
    50 times the bound: ct's Adam forgetting its moments after step 0 fails on 69% of the embedding's
    decided weights, by up to 9e-4."""
    import torch

    from reference import post_norm as post_ref
    from reference.parity import (assert_grads_close, assert_relu_margins, clear_relu_knife_edges, ct_to_torch,
                                  float64_copy, torch_to_ct)
    from ctransformer.tasks import Run
    from ctransformer.tasks.multi30k import Multi30k
    from ctransformer.train import train_step

    task = Multi30k(_tiny(corpus_files), Run(checkpoint=str(tmp_path / "run.safetensors"), log=_quiet))  # vocabulary cached there
    cfg = task.cfg
    assert cfg["label_smoothing"] == 0.1 and cfg["grad_clip"] == 1.0
    ct.manual_seed(0)
    model, optimizer, scheduler = task.build()
    model.eval()
    n = len(task.vocab)

    def build():
        return post_ref.Transformer(n, n, PAD_ID, PAD_ID, d_word_vec=32, d_model=32, d_inner=64, n_layers=1,
                                    n_head=4, d_k=8, d_v=8, n_position=cfg["n_position"],
                                    scale_emb_or_prj=cfg["scale_emb_or_prj"])

    def loss_of(m, src, tgt):
        logits = m(torch.from_numpy(src), torch.from_numpy(tgt[:, :-1]))
        return torch.nn.functional.cross_entropy(logits, torch.from_numpy(tgt[:, 1:].reshape(-1)),
                                                 ignore_index=PAD_ID, label_smoothing=0.1)

    ref = build().eval()
    ct_to_torch(model, ref)
    assert ref.trg_word_prj.weight is ref.encoder.src_word_emb.weight          # tied in torch too
    torch_opt = torch.optim.Adam(ref.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    torch_sched = torch.optim.lr_scheduler.LambdaLR(
        torch_opt, lambda step: ct.annotated.rate(step, cfg["d_model"], cfg["lr_factor"], cfg["warmup"]))
    noise = {}
    rates = []
    for step in range(3):
        src, tgt = task.batcher.arrays(task.batcher.at_step(step)[2])
        forward = lambda m: m(torch.from_numpy(src), torch.from_numpy(tgt[:, :-1]))  # noqa: E731
        clear_relu_knife_edges(ref, build, forward)
        torch_to_ct(ref, model)            # in place: ct's optimizer keeps its parameters and moments
        assert_relu_margins(ref, build, forward)
        exact = float64_copy(ref, build)
        loss_of(exact, src, tgt).backward()
        rate = torch_opt.param_groups[0]["lr"]
        rates.append(rate)

        metrics = train_step(task, model, optimizer, scheduler, None, step)
        loss = loss_of(ref, src, tgt)
        torch_opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), cfg["grad_clip"])   # the recipe clips (1.0)
        torch_opt.step()
        torch_sched.step()
        assert metrics["loss"] == pytest.approx(loss.item(), rel=1e-5)
        assert metrics["tokens"] == int((tgt[:, 1:] != PAD_ID).sum())
        assert metrics["lr"] == pytest.approx(rate, rel=1e-12)
        assert_grads_close(model, exact, rel=1e-5)

        ours, theirs = dict(model.named_parameters()), dict(ref.named_parameters())
        assert list(ours) == list(theirs)             # every parameter, the tied matrix once in both
        set_aside = total = 0
        for name, p in exact.named_parameters():
            g = p.grad.numpy()
            noise[name] = max(noise.get(name, 0.0), float(np.abs(theirs[name].grad.numpy() - g).max()),
                              float(np.abs(ours[name].grad.numpy() - g).max()))
            decided = np.abs(g) >= 1000 * noise[name]
            got, expected = ours[name].numpy(), theirs[name].detach().numpy()
            np.testing.assert_allclose(got[decided], expected[decided], rtol=0, atol=1e-5, err_msg=name)
            np.testing.assert_allclose(got[~decided], expected[~decided], rtol=0, atol=2.01 * rate, err_msg=name)
            set_aside += int((~decided).sum())
            total += g.size
        assert set_aside <= 0.1 * total, f"step {step}: {set_aside} of {total} gradients within noise of zero"
    assert rates == pytest.approx([5.379e-4, 5.379e-4, 1.0758e-3], rel=1e-3)


def test_average_checkpoints_checks_its_inputs(trained, tmp_path):
    from ctransformer.checkpoint import CheckpointError, average_checkpoints, read_checkpoint, save_checkpoint

    _, _, _, path = trained
    stem = path[: -len(".safetensors")]
    out = str(tmp_path / "avg.safetensors")
    average_checkpoints([stem + ".best.safetensors"] * 2, out)       # the mean of x and x is x, bit for bit
    a, meta_a = read_checkpoint(stem + ".best.safetensors")
    b, meta_b = read_checkpoint(out)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert meta_a["config"] == meta_b["config"] and "optimizer" not in meta_b
    other = str(tmp_path / "linear.safetensors")
    save_checkpoint(other, ct.nn.Linear(3, 2))
    with pytest.raises(CheckpointError, match="does not hold the same weights"):
        average_checkpoints([path, other], out)
    with pytest.raises(ValueError, match="no checkpoint"):
        average_checkpoints([], out)
