"""ctransformer.plots and scripts/render_plots.py: the charts carry ctransformer's numbers and render to PNG.

The blog's four charts (the Annotated Transformer's) are built here from ctransformer's own output, as the
script builds them, checked against the posts' formulas (tests/plot_formulas.py), and saved with
plots.save_png.
"""
import importlib.util
import pathlib
import struct

import numpy as np
import pytest

import ctransformer as ct
from plot_formulas import annotated_penalization_loss, annotated_rate, annotated_true_dist, sinusoid_table

pytest.importorskip("altair")
pytest.importorskip("vl_convert")
from ctransformer import plots  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
BLOG_PLOTS = ["learning_rate", "label_smoothing", "subsequent_mask", "penalization"]


def load_script():
    spec = importlib.util.spec_from_file_location("render_plots", ROOT / "scripts" / "render_plots.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def render_plots():
    return load_script()


@pytest.fixture(scope="module")
def charts(render_plots):
    return render_plots.blog_charts()


def png_size(path):
    """(width, height) from a PNG's IHDR chunk, after checking the signature."""
    data = pathlib.Path(path).read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def chart_rows(chart):
    """The inline data of a chart, as altair serialises it."""
    spec = chart.to_dict()
    if "datasets" in spec:
        (rows,) = spec["datasets"].values()
        return rows
    return spec["data"]["values"]


def test_learning_rate_chart_data(render_plots):
    rates = render_plots.learning_rates(steps=9000)
    assert list(rates) == ["512 - 4000", "512 - 8000", "256 - 4000"]
    for (label, lrs), (m, f, w) in zip(rates.items(), [(512, 1, 4000), (512, 1, 8000), (256, 1, 4000)]):
        assert lrs == [ct.optim.rate(s, m, f, w) for s in range(9000)], label
        np.testing.assert_allclose(lrs, [annotated_rate(s, m, f, w) for s in range(9000)], rtol=1e-15,
                                   atol=0)
    rows = chart_rows(plots.learning_rate_chart(rates))
    assert len(rows) == 3 * 9000
    assert {r["model_size - warmup"] for r in rows} == set(rates)


def test_label_smoothing_chart_data(render_plots):
    true_dist = render_plots.label_smoothing_dist()
    np.testing.assert_allclose(true_dist, annotated_true_dist([2, 1, 0, 3, 3]), rtol=0, atol=1e-7)
    rows = chart_rows(plots.label_smoothing_chart(true_dist))
    assert len(rows) == 25
    for r in rows:
        assert r["target distribution"] == pytest.approx(float(true_dist[r["rows"], r["columns"]]))


def test_penalization_chart_data(render_plots):
    losses = render_plots.penalization_losses()
    assert len(losses) == 99
    np.testing.assert_allclose([losses[0], losses[-1]],
                               [annotated_penalization_loss(1), annotated_penalization_loss(99)], rtol=1e-5)
    rows = chart_rows(plots.penalization_chart(losses))
    assert [r["Steps"] for r in rows] == list(range(99)) and [r["Loss"] for r in rows] == losses


def test_subsequent_mask_chart_data():
    rows = chart_rows(plots.subsequent_mask_chart(ct.annotated.subsequent_mask(20)[0]))
    assert len(rows) == 400
    for r in rows:   # "Masking" is the query row, "Window" the key column
        assert r["Subsequent Mask"] == float(r["Window"] <= r["Masking"])


@pytest.mark.parametrize("formula", ["paired", "per_index"])
@pytest.mark.parametrize("d_hid, n_position", [(32, 50), (512, 200), (6, 7)])
def test_positional_encoding_table(formula, d_hid, n_position):
    """pos_table equals the formula computed in NumPy float64, then rounded to float32."""
    table = ct.nn.PositionalEncoding(d_hid, n_position, pe_formula=formula).pos_table.numpy()
    assert table.shape == (1, n_position, d_hid) and table.dtype == np.float32
    np.testing.assert_allclose(table[0], sinusoid_table(n_position, d_hid, formula), rtol=0, atol=2e-7)


def test_heatmap_and_attention_chart_data():
    weights = np.random.default_rng(0).random((2, 3, 4))
    rows = chart_rows(plots.attention_chart(weights, list("abc"), list("wxyz"), title="t"))
    assert len(rows) == 24
    for r in rows:
        q, k = int(r["query"].split()[0]), int(r["key"].split()[0])
        assert r["weight"] == weights[r["head"], q, k]
        assert r["query"].endswith("abc"[q]) and r["key"].endswith("wxyz"[k])
    table = np.arange(60.0).reshape(30, 2)
    rows = chart_rows(plots.positional_encoding_chart(table[None]))   # the (1, n, d) buffer is accepted
    assert all(r["value"] == table[r["position"], r["dimension"]] for r in rows)


def test_training_curves_chart():
    history = [{"step": 10, "loss": 3.0, "accuracy": 0.1, "val_loss": 3.1}, {"step": 20, "loss": 2.0, "accuracy": 0.4}]
    chart = plots.training_curves_chart(history, metrics=(("loss", "val_loss"), "accuracy"))
    spec = chart.to_dict()
    assert [panel["title"] for panel in spec["hconcat"]] == ["loss / val_loss", "accuracy"]
    single = plots.training_curves_chart(history)
    assert {(r["step"], r["metric"]) for r in chart_rows(single)} == {(10, "loss"), (20, "loss")}
    with pytest.raises(ValueError):
        plots.training_curves_chart(history, metrics=("bleu",))


@pytest.mark.parametrize("name", BLOG_PLOTS + ["positional_encoding"])
def test_save_png(charts, name, tmp_path):
    """Every chart of the script renders to a valid PNG (vl-convert, no browser)."""
    path = plots.save_png(charts[name], tmp_path / f"{name}.png")
    width, height = png_size(path)
    assert width > 100 and height > 100


def test_render_plots_script(render_plots, tmp_path, capsys):
    assert render_plots.main(["--out", str(tmp_path)]) == 0
    assert sorted(p.stem for p in tmp_path.glob("*.png")) == sorted(BLOG_PLOTS + ["positional_encoding"])
    for path in tmp_path.glob("*.png"):
        png_size(path)


@pytest.mark.parametrize("name", BLOG_PLOTS + ["positional_encoding", "toy_cross_attention"])
def test_committed_images(name):
    """docs/images holds the script's PNGs for the guide."""
    width, height = png_size(ROOT / "docs" / "images" / f"{name}.png")
    assert width > 100 and height > 100
