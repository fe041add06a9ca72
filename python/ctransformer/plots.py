"""Altair charts of ctransformer results: the Annotated Transformer's plots and the walk-throughs' views.

Each function takes plain arrays (NumPy, or ctransformer tensors via ``.numpy()``) that ctransformer
computed, and returns an ``altair.Chart``; ``save_png`` renders one with vl-convert. Keeping the
charts here keeps the notebooks short and lets the tests check each chart's data.
"""
import numpy as np

try:
    import altair as alt
    import pandas as pd
except ImportError as error:  # pragma: no cover - the message is the point
    raise ImportError("ctransformer.plots needs altair and pandas: pip install 'ctransformer[notebooks]'") from error

alt.data_transformers.disable_max_rows()


def _grid_frame(grid, value, x_name, y_name):
    """A long table of a 2-D grid: one row per cell, x = column index, y = row index."""
    grid = np.asarray(grid, dtype=np.float64)
    rows, cols = np.indices(grid.shape)
    return pd.DataFrame({value: grid.ravel(), x_name: cols.ravel(), y_name: rows.ravel()})


def _sparse_axis(n, most=25):
    """An ordinal axis that labels every k-th index when there are more than `most` of them."""
    if n <= most:
        return alt.Axis()
    step = int(np.ceil(n / 20))
    step = next(s for s in (2, 5, 10, 20, 25, 50, 100, step) if s >= step)
    return alt.Axis(values=list(range(0, n, step)), labelAngle=0)


def heatmap(grid, value, x_name, y_name, size=250, scheme="viridis", interactive=False):
    """A rect heat map of a 2-D array with a viridis colour scale, as the Annotated Transformer draws them.

    size: the side of the square plot in pixels, or (width, height).
    """
    width, height = (size, size) if np.isscalar(size) else size
    grid = np.asarray(grid)
    chart = (
        alt.Chart(_grid_frame(grid, value, x_name, y_name))
        .mark_rect()
        .properties(height=height, width=width)
        .encode(alt.X(f"{x_name}:O", axis=_sparse_axis(grid.shape[1])),
                alt.Y(f"{y_name}:O", axis=_sparse_axis(grid.shape[0])),
                alt.Color(f"{value}:Q", scale=alt.Scale(scheme=scheme)))
    )
    return chart.interactive() if interactive else chart


def learning_rate_chart(learning_rates):
    """Plot 1 of the Annotated Transformer: lr against step, one line per "model_size - warmup" label.

    learning_rates: {label: sequence of lr values, one per step}.
    """
    frame = pd.concat(
        [pd.DataFrame({"Learning Rate": np.asarray(values, dtype=np.float64), "model_size - warmup": label,
                       "step": np.arange(len(values))})
         for label, values in learning_rates.items()]
    )
    return (
        alt.Chart(frame).mark_line().properties(width=600)
        .encode(x="step", y="Learning Rate", color="model_size - warmup:N").interactive()
    )


def label_smoothing_chart(true_dist):
    """Plot 2 of the Annotated Transformer: the smoothed target distribution, rows x columns."""
    return heatmap(true_dist, "target distribution", "columns", "rows", size=200)


def subsequent_mask_chart(mask):
    """Plot 3 of the Annotated Transformer: a (size, size) subsequent mask, "Window" x "Masking"."""
    return heatmap(np.asarray(mask, dtype=np.float64), "Subsequent Mask", "Window", "Masking", interactive=True)


def penalization_chart(losses):
    """Plot 4 of the Annotated Transformer: the label-smoothing loss as the prediction grows more confident."""
    frame = pd.DataFrame({"Loss": np.asarray(losses, dtype=np.float64), "Steps": np.arange(len(losses))})
    return alt.Chart(frame).mark_line().properties(width=350).encode(x="Steps", y="Loss").interactive()


def mask_chart(mask, title, x_name="key position", y_name="query position"):
    """A boolean attention mask (True = may attend) as a heat map."""
    return heatmap(np.asarray(mask, dtype=np.float64), "may attend", x_name, y_name).properties(title=title)


def positional_encoding_chart(table, title="positional encoding", size=(300, 400)):
    """The (n_position, d) sinusoid table as a heat map: dimension across, position down."""
    table = np.asarray(table)
    if table.ndim == 3:  # the module's (1, n_position, d) buffer
        table = table[0]
    return heatmap(table, "value", "dimension", "position", size=size).properties(title=title)


def positional_encoding_lines(table, dims=(4, 5, 6, 7), title="positional encoding, dimensions 4-7"):
    """Chosen dimensions of the table over position, as the Annotated Transformer shows them."""
    table = np.asarray(table, dtype=np.float64)
    if table.ndim == 3:
        table = table[0]
    frame = pd.concat(
        [pd.DataFrame({"embedding": table[:, d], "dimension": d, "position": np.arange(table.shape[0])}) for d in dims]
    )
    return (
        alt.Chart(frame).mark_line().properties(width=600, title=title)
        .encode(x="position", y="embedding", color="dimension:N").interactive()
    )


def attention_chart(weights, row_labels=None, col_labels=None, title="", size=None, columns=2):
    """Attention weights of one layer, (heads, Lq, Lk): one heat map per head, `columns` per row.

    Labels name the query rows and key columns (prefixed with their position); size defaults to about
    8 pixels per key, so word labels stay readable.
    """
    weights = np.asarray(weights, dtype=np.float64)
    if weights.ndim == 2:
        weights = weights[None]
    if size is None:
        size = max(180, 8 * max(weights.shape[1:]))
    frames = []
    for h, grid in enumerate(weights):
        frame = _grid_frame(grid, "weight", "key", "query")
        frame["head"] = h
        if col_labels is not None:
            frame["key"] = [f"{i:02d} {col_labels[i]}" for i in frame["key"]]
        if row_labels is not None:
            frame["query"] = [f"{i:02d} {row_labels[i]}" for i in frame["query"]]
        frames.append(frame)
    return (
        alt.Chart(pd.concat(frames)).mark_rect().properties(height=size, width=size)
        .encode(alt.X("key:O"), alt.Y("query:O"), alt.Color("weight:Q", scale=alt.Scale(scheme="viridis")))
        .facet(facet=alt.Facet("head:O"), columns=columns, title=title)
    )


def training_curves_chart(history, x="step", metrics=("loss",), width=350):
    """Training curves from a list of dicts (one per logged step), one panel per entry of `metrics`.

    An entry is a metric name or a tuple of names drawn together (e.g. ("loss", "val_loss")); each
    panel has its own y scale, so a loss near 3 and an accuracy near 1 are both readable. Steps
    where a metric was not logged are left out of its line.
    """
    frame = pd.DataFrame(list(history))
    panels = []
    for entry in metrics:
        names = [entry] if isinstance(entry, str) else list(entry)
        names = [m for m in names if m in frame]
        if not names:
            continue
        long = frame.melt(id_vars=[x], value_vars=names, var_name="metric").dropna(subset=["value"])
        panels.append(
            alt.Chart(long).mark_line(point=len(long) < 40).properties(width=width, title=" / ".join(names))
            .encode(x=f"{x}:Q", y=alt.Y("value:Q", title=None, scale=alt.Scale(zero=False)),
                    color=alt.Color("metric:N", legend=alt.Legend() if len(names) > 1 else None))
        )
    if not panels:
        raise ValueError(f"training_curves_chart: none of {metrics} is in the history")
    chart = panels[0] if len(panels) == 1 else alt.hconcat(*panels).resolve_scale(color="independent")
    return chart


def save_png(chart, path, scale=2.0):
    """Render a chart to a PNG file with vl-convert (no browser needed)."""
    import vl_convert as vlc

    png = vlc.vegalite_to_png(chart.to_json(), scale=scale)
    with open(path, "wb") as f:
        f.write(png)
    return path
