"""Run the notebooks of notebooks/ in a fresh kernel, with their parameters overridden.

The kernel is the test process's own Python (``sys.executable``), named by a kernel spec written to a
temporary folder, so neither a user-level ``python3`` kernel nor a missing one changes what runs. The
kernel's PYTHONPATH starts with the folder that holds the ``ctransformer`` this process imported
(``python/`` of a development build, or site-packages after ``pip install .``), made absolute because
the kernel runs in notebooks/.

Parameters follow papermill's convention without papermill: the first code cell is tagged
``parameters``; ``run_notebook(name, **overrides)`` inserts a cell tagged ``injected-parameters`` right
after it that assigns the overrides, so they win over the defaults.

The same cell switches altair to its "json" renderer: charts then come out as their Vega-Lite spec
(``application/json``) instead of altair's default HTML page around it, so the tests can read each
chart's data. (Altair 6's "mimetype" renderer names its output ``application/vnd.vegalite.v6.json``,
which nbformat rejects.) The spec, and so the data, is the same whatever the renderer.
"""
import json
import os
import pathlib
import sys
import tempfile

import nbformat
import numpy as np
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

import ctransformer

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
KERNEL_NAME = "ctransformer-tests"


def parameters_cell(nb):
    """The index of the first code cell, which must be tagged 'parameters'."""
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert "parameters" in cell.metadata.get("tags", []), "the first code cell must be tagged 'parameters'"
            return index
    raise AssertionError("the notebook has no code cell")


def inject_parameters(nb, overrides):
    """Insert a cell assigning `overrides` right after the parameters cell (papermill's place)."""
    index = parameters_cell(nb)
    source = ("# Injected by the tests: parameters, and charts as Vega-Lite JSON\n"
              + "".join(f"{k} = {v!r}\n" for k, v in overrides.items())
              + "import altair\n_ = altair.renderers.enable('json')\n")
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(index + 1, cell)
    return nb


def _kernel_manager(spec_dir):
    """A KernelManager for this Python, with PYTHONPATH leading to the ctransformer under test."""
    package_parent = str(pathlib.Path(ctransformer.__file__).resolve().parents[1])
    paths = [package_parent] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {"PYTHONPATH": os.pathsep.join(str(pathlib.Path(p).resolve()) for p in paths)}
    kernel_dir = pathlib.Path(spec_dir) / KERNEL_NAME
    kernel_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "ctransformer tests", "language": "python", "env": env,
    }
    (kernel_dir / "kernel.json").write_text(json.dumps(spec))
    return KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(spec_dir)]))


def run_notebook(name, timeout=900, **overrides):
    """Execute notebooks/<name> top to bottom with `overrides`; returns the executed notebook.

    Any error in a cell raises nbclient's CellExecutionError, which names the cell and the traceback.
    """
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    inject_parameters(nb, overrides)
    with tempfile.TemporaryDirectory() as spec_dir:
        client = NotebookClient(nb, km=_kernel_manager(spec_dir), timeout=timeout, kernel_name=KERNEL_NAME,
                                resources={"metadata": {"path": str(NOTEBOOKS)}})
        client.execute()
    return nb


def vegalite_specs(nb):
    """Every Vega-Lite spec the notebook displayed (the last version of updated displays)."""
    specs = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            for mime, data in output.get("data", {}).items():
                if mime == "application/json" and isinstance(data, dict) and "$schema" in data:
                    specs.append(data)
    return specs


def _fields(spec):
    encoding = spec.get("encoding", {})
    fields = {name: enc.get("field") for name, enc in encoding.items() if isinstance(enc, dict)}
    return fields


def find_specs(specs, title=None, **fields):
    """(spec, rows) of every chart (or sub-chart) whose encoding maps these channels to these fields,
    e.g. find_specs(specs, y="Loss"), and whose title (its own or its parent's) is `title` if given;
    rows are its inline data (a sub-chart inherits its parent's data)."""
    found = []

    def visit(spec, datasets, data, parent_title):
        data = spec.get("data", data)
        own = spec.get("title", parent_title)
        own = own.get("text") if isinstance(own, dict) else own
        if _fields(spec).items() >= fields.items() and "mark" in spec and title in (None, own):
            found.append((spec, datasets[data["name"]] if "name" in data else data["values"]))
        for key in ("spec", "layer", "hconcat", "vconcat", "concat"):
            sub = spec.get(key)
            for s in (sub if isinstance(sub, list) else [sub] if isinstance(sub, dict) else []):
                visit(s, datasets, data, own)

    for spec in specs:
        visit(spec, spec.get("datasets", {}), {}, None)
    return found


def find_spec(specs, title=None, **fields):
    """The one chart that find_specs finds."""
    found = find_specs(specs, title, **fields)
    assert len(found) == 1, f"expected one chart with fields {fields} and title {title!r}, found {len(found)}"
    return found[0]


def grid(rows, value, x_name, y_name):
    """A heat map's rows back to a 2-D array: grid[y, x] = value (labels "07 word" count as 7)."""
    def index(label):
        return int(str(label).split()[0])

    ys = [index(r[y_name]) for r in rows]
    xs = [index(r[x_name]) for r in rows]
    out = np.full((max(ys) + 1, max(xs) + 1), np.nan)
    for r, i, j in zip(rows, ys, xs):
        out[i, j] = r[value]
    return out
