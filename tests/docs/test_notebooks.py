"""Every notebook in notebooks/ runs top to bottom in a fresh kernel, and its charts show the right numbers.

Each test executes one notebook with nbclient (see notebook_runner: this Python as the kernel, the
parameters cell overridden by an injected cell, long runs cut to a few steps) and fails on any cell
error. The blog's four plots (the Annotated Transformer's) are then read back from the executed notebook's
output and compared with values computed here independently: the posts' formulas in plain Python / NumPy
float64.
"""
import math
import re

import numpy as np
import pytest

import ctransformer as ct
from ctransformer.data import PAD, toy_translation_batch
from plot_formulas import annotated_penalization_loss, annotated_rate, annotated_true_dist, sinusoid_table

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("altair")
from notebook_runner import NOTEBOOKS, find_spec, find_specs, grid, run_notebook, vegalite_specs  # noqa: E402


def test_every_notebook_has_a_test():
    tested = {"learning_rate", "label_smoothing", "masks", "positional_encoding", "toy_translation",
              "gpt_shakespeare", "multi30k", "opus_mt"}
    assert {p.stem for p in NOTEBOOKS.glob("*.ipynb")} == tested


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.stem)
def test_notebook_is_committed_clean(path):
    """No outputs in git, and the first code cell is the tagged parameters cell the tests override."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert all(not cell.outputs and cell.execution_count is None for cell in code), f"{path.name} has outputs"
    assert "parameters" in code[0].metadata.get("tags", []), f"{path.name}: first code cell not tagged"
    assert code[0].source.startswith("# Parameters"), path.name
    assert nb.cells[0].cell_type == "markdown", f"{path.name} should open with a short explanation"


def test_learning_rate_notebook():
    """The Annotated Transformer's plot 1: lr of a real Adam under LambdaLR(rate), 20000 steps, three settings."""
    nb = run_notebook("learning_rate.ipynb")
    spec, rows = find_spec(vegalite_specs(nb), y="Learning Rate")
    assert spec["mark"]["type"] == "line" and spec["encoding"]["color"]["field"] == "model_size - warmup"
    for model_size, factor, warmup in [(512, 1, 4000), (512, 1, 8000), (256, 1, 4000)]:
        label = f"{model_size} - {warmup}"
        line = sorted((r["step"], r["Learning Rate"]) for r in rows if r["model_size - warmup"] == label)
        assert [s for s, _ in line] == list(range(20000)), label
        lrs = [lr for _, lr in line]
        # Exactly ctransformer's rate (LambdaLR multiplies lr = 1 by it), and the Annotated Transformer's formula
        # to the last bit but one (exact equality is test_schedules.py's business).
        assert lrs == [ct.optim.rate(s, model_size, factor, warmup) for s in range(20000)], label
        np.testing.assert_allclose(lrs, [annotated_rate(s, model_size, factor, warmup) for s in range(20000)],
                                   rtol=1e-15, atol=0, err_msg=label)
        assert int(np.argmax(lrs)) == warmup


def test_label_smoothing_notebook():
    """The Annotated Transformer's plots 2 and 4: LabelSmoothing(5, 0, 0.4)'s true_dist, and the penalisation
    curve."""
    nb = run_notebook("label_smoothing.ipynb")
    specs = vegalite_specs(nb)

    spec, rows = find_spec(specs, color="target distribution")
    assert spec["encoding"]["color"]["scale"]["scheme"] == "viridis"
    shown = grid(rows, "target distribution", "columns", "rows")
    expected = annotated_true_dist([2, 1, 0, 3, 3])
    assert expected[0].tolist() == [0, 0.4 / 3, 0.6, 0.4 / 3, 0.4 / 3] and not expected[2].any()
    np.testing.assert_allclose(shown, expected, rtol=0, atol=1e-7)   # float32 true_dist

    _, rows = find_spec(specs, y="Loss")
    losses = [r["Loss"] for r in sorted(rows, key=lambda r: r["Steps"])]
    assert len(losses) == 99
    expected = [annotated_penalization_loss(x) for x in range(1, 100)]
    np.testing.assert_allclose([losses[0], losses[-1]], [expected[0], expected[-1]], rtol=1e-5)
    np.testing.assert_allclose(losses, expected, rtol=1e-5)           # the whole curve, float32 maths


def test_masks_notebook():
    """The Annotated Transformer's plot 3 (the 20x20 subsequent mask) and the toy translator's masks of a real
    padded batch."""
    nb = run_notebook("masks.ipynb")
    specs = vegalite_specs(nb)

    spec, rows = find_spec(specs, color="Subsequent Mask")
    assert spec["encoding"]["x"]["field"] == "Window" and spec["encoding"]["y"]["field"] == "Masking"
    shown = grid(rows, "Subsequent Mask", "Window", "Masking")
    np.testing.assert_array_equal(shown, np.tril(np.ones((20, 20))))  # lower triangle with the diagonal

    # The notebook's batch (its default SEED = 0, BATCH = 4, SAMPLE = 0), rebuilt here.
    x, y = toy_translation_batch(np.random.default_rng(0), 4)
    trg = y[:, :-1]
    _, rows = find_spec(specs, title="pad mask of source 0", color="may attend")
    pad = grid(rows, "may attend", "key position", "query position")
    assert 0 < (x[0] != PAD).sum() < 50, "the sample must be padded for the test to mean something"
    np.testing.assert_array_equal(pad, np.broadcast_to(x[0] != PAD, (50, 50)))
    _, rows = find_spec(specs, title="pad and causal mask of target 0", color="may attend")
    both = grid(rows, "may attend", "key position", "query position")
    np.testing.assert_array_equal(both, (trg[0] != PAD)[None, :] & np.tril(np.ones((50, 50), dtype=bool)))


def test_positional_encoding_notebook():
    """Both formulas' tables, as heat maps and as dimensions 4-7 over position."""
    nb = run_notebook("positional_encoding.ipynb")
    specs = vegalite_specs(nb)
    # The chart titles as notebooks/positional_encoding.ipynb writes them: the test finds the charts by them.
    for formula, title in [("paired", "paired (the paper, jadore801120's)"), ("per_index", "per_index (the toy translator)")]:
        expected = sinusoid_table(100, 32, formula)
        _, rows = find_spec(specs, title=title, color="value")
        np.testing.assert_allclose(grid(rows, "value", "dimension", "position"), expected, rtol=0, atol=1e-7,
                                   err_msg=formula)
        _, rows = find_spec(specs, title=f"{formula}: dimensions 4-7 over position", y="embedding")
        for d in (4, 5, 6, 7):
            line = [r["embedding"] for r in sorted(rows, key=lambda r: r["position"]) if r["dimension"] == d]
            np.testing.assert_allclose(line, expected[:, d], rtol=0, atol=1e-7, err_msg=f"{formula} dim {d}")


def outputs_text(nb):
    return "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "")
                   for cell in nb.cells for o in cell.get("outputs", []))


def test_toy_translation_notebook():
    """A few training steps, decoding and every attention map (the default STEPS trains for minutes)."""
    nb = run_notebook("toy_translation.ipynb", STEPS=30, LOG_EVERY=10, EVAL_SAMPLES=8, N_SAMPLES=2)
    specs = vegalite_specs(nb)
    # The live chart ends as its last update: one point per LOG_EVERY steps, in two panels.
    _, rows = find_spec(specs, title="loss", x="step")
    assert [r["step"] for r in rows] == [10, 20, 30]
    assert all(0 < r["value"] < 10 for r in rows)
    _, rows = find_spec(specs, title="accuracy", x="step")
    assert all(0 <= r["value"] <= 1 for r in rows)
    assert "token accuracy" in outputs_text(nb)
    # 3 layers x (encoder self, decoder self, cross) attention, 4 heads each; each query's weights sum to 1
    # over the real keys the chart keeps (padding keys are masked to 0); the decoder never looks ahead.
    assert len(find_specs(specs, color="weight")) == 9
    for layer in (1, 2, 3):
        for kind in ("encoder layer {}: self-attention", "decoder layer {}: masked self-attention",
                     "decoder layer {}: cross-attention"):
            _, rows = find_spec(specs, title=kind.format(layer), color="weight")
            assert sorted({r["head"] for r in rows}) == [0, 1, 2, 3]
            for head in range(4):
                weights = grid([r for r in rows if r["head"] == head], "weight", "key", "query")
                assert not np.isnan(weights).any()
                np.testing.assert_allclose(weights.sum(1), 1, rtol=0, atol=1e-5)
                if "masked" in kind:
                    assert (np.triu(weights, 1) == 0).all(), "the decoder must not look ahead"


def test_gpt_shakespeare_notebook():
    """A few GPT steps on Tiny Shakespeare, the loss chart and a generated sample."""
    nb = run_notebook("gpt_shakespeare.ipynb", STEPS=6, LOG_EVERY=3, EVAL_ITERS=1, SAMPLE_CHARS=40)
    specs = vegalite_specs(nb)
    _, rows = find_spec(specs, title="loss / val_loss", x="step")
    assert sorted({(r["step"], r["metric"]) for r in rows}) == [(3, "loss"), (3, "val_loss"), (6, "loss"),
                                                               (6, "val_loss")]
    # Finite, and no worse than guessing among the 66 ids (N(0, 0.02) weights start there).
    assert all(0 < r["value"] < math.log(66) + 0.1 for r in rows)
    sample = nb.cells[-1].outputs[0]["text"]
    assert len(sample.rstrip("\n")) >= 30


def test_multi30k_notebook(tmp_path):
    """No checkpoint: a 5-step run on 300 Multi30k pairs written as the user's own files, then the three
    sentences translated and one sentence's cross-attention, a map per head of subword labels."""
    from ctransformer.data.parallel_corpus import multi30k
    train, val = multi30k("train"), multi30k("val")
    files = {}
    for name, lines in (("train_src", train.src[:300]), ("train_tgt", train.tgt[:300]),
                        ("valid_src", val.src[:20]), ("valid_tgt", val.tgt[:20])):
        files[name] = str(tmp_path / f"{name}.txt")
        (tmp_path / f"{name}.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    short = {**files, "vocab_size": 300, "d_model": 32, "d_inner": 64, "n_layers": 2, "n_head": 4,
             "batch_tokens": 600, "n_position": 64, "max_len": 60, "val_sentences": 5, "eval_batch_size": 20,
             "beam_size": 1}
    sentences = ["Ein Mann fährt Fahrrad.", "Zwei Hunde laufen über eine Wiese."]
    nb = run_notebook("multi30k.ipynb", CHECKPOINT=str(tmp_path / "absent.safetensors"), TRAIN_STEPS=5,
                      SHORT_RUN=short, SENTENCES=sentences, BEAM_SIZE=2, ATTENTION_SENTENCE=1)
    text = outputs_text(nb)
    assert "training 5 steps" in text and "300 subwords" in text
    table = next(o["data"]["text/plain"] for cell in nb.cells for o in cell.get("outputs", [])
                 if "text/plain" in o.get("data", {}) and "English (ctransformer)" in o["data"]["text/plain"])
    assert all(s[:12] in table for s in sentences)
    _, rows = find_spec(vegalite_specs(nb), title="decoder layer 2: cross-attention", color="weight")
    assert sorted({r["head"] for r in rows}) == [0, 1, 2, 3]
    keys = sorted({r["key"] for r in rows}, key=lambda k: int(k.split()[0]))
    queries = sorted({r["query"] for r in rows}, key=lambda q: int(q.split()[0]))
    assert keys[-1].endswith("</s>") and queries[0].endswith("<s>")      # source + eos; bos + output
    assert any("Hund" in k or "Wiese" in k for k in keys)                 # the chosen sentence's subwords
    for head in range(4):
        weights = grid([r for r in rows if r["head"] == head], "weight", "key", "query")
        assert weights.shape == (len(queries), len(keys))
        np.testing.assert_allclose(weights.sum(1), 1, rtol=0, atol=1e-5)  # a distribution over the source


def test_opus_mt_notebook_on_a_stand_in(tmp_path):
    """No opus-mt directory here: the notebook builds its stand-in (random weights, Multi30k sentencepiece
    models), translates, draws the cross-attention and fine-tunes a few steps, which lowers the validation loss."""
    stand_in = {"d_model": 32, "d_inner": 64, "n_layers": 2, "n_head": 4, "vocab_size": 400}
    sentences = ["Ein Mann fährt Fahrrad.", "Zwei Hunde laufen über eine Wiese."]
    nb = run_notebook("opus_mt.ipynb", PRETRAINED=str(tmp_path / "absent"), SENTENCES=sentences, BEAM_SIZE=2,
                      ATTENTION_SENTENCE=1, FINE_TUNE_STEPS=30, FINE_TUNE_PAIRS=600, STAND_IN=stand_in)
    text = outputs_text(nb)
    assert "building a stand-in" in text and "silu" in text
    tables = [o["data"]["text/plain"] for cell in nb.cells for o in cell.get("outputs", [])
              if "text/plain" in o.get("data", {}) and "German" in o["data"]["text/plain"]]
    assert len(tables) == 2 and all(s[:12] in tables[0] for s in sentences) and "after fine-tuning" in tables[1]
    _, rows = find_spec(vegalite_specs(nb), title="decoder layer 2: cross-attention", color="weight")
    assert sorted({r["head"] for r in rows}) == [0, 1, 2, 3]
    loss = re.search(r"validation loss ([\d.]+) -> ([\d.]+)", text)
    assert loss and float(loss.group(2)) < float(loss.group(1))
    assert "saved to" in text
