"""The README and the guide (docs/*.md) as a reader meets them: every Python block runs as written, the
site builds with `mkdocs build --strict`, and its API reference documents every public name (issue 36)."""
import importlib
import inspect
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "DEVELOPING.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCKS = [(page, i, block) for page in PAGES
          for i, block in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S))]
# The modules the API reference covers (docs/api.md), each with every name of its __all__.
API_MODULES = ["ctransformer", "ctransformer.functional", "ctransformer.nn", "ctransformer.optim", "ctransformer.decode",
               "ctransformer.amp", "ctransformer.quantization", "ctransformer.annotated", "ctransformer.export", "ctransformer.translator", "ctransformer.precision",
               "ctransformer.marian", "ctransformer.gpt2", "ctransformer.sampling"]


def test_readme_python_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    assert blocks, "the README has a Python example"
    namespace = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    assert namespace["out"].shape == (2, 10)
    assert namespace["loss"].item() > 0


@pytest.mark.parametrize("page,index,block", BLOCKS, ids=[f"{p.name}-{i}" for p, i, _ in BLOCKS])
def test_every_python_block_of_the_guide_runs(page, index, block):
    exec(compile(block, f"{page.name} (Python block {index})", "exec"), {"__name__": "__guide__"})


def test_the_readme_is_a_front_page():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; the guide (docs/) holds the rest"
    for link in re.findall(r"\]\((docs/[^)#]+|DEVELOPING\.md)", "\n".join(lines)):
        assert (REPO / link).is_file(), f"README links to {link}, which does not exist"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if shutil.which("mkdocs", path=str(pathlib.Path(sys.executable).parent)) is None:
        pytest.fail("mkdocs is not installed: pip install .[test] installs mkdocs-material and mkdocstrings-python")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([str(pathlib.Path(sys.executable).parent / "mkdocs"), "build", "--strict", "-q", "-d", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_the_site_builds_strictly_with_every_page(site):
    for page in ["index.html", "install/index.html", "translation/index.html", "api/index.html",
                 "contributing/index.html", "DESIGN/index.html"]:
        assert (site / page).is_file(), page
    home = (site / "index.html").read_text()
    assert "A taste, next to the PyTorch you know" in home            # the README, read by the hook
    assert 'href="translation/"' in home and "docs/translation.md" not in home   # its links made the site's


@pytest.mark.parametrize("module", API_MODULES)
def test_every_public_name_is_in_the_api_reference(site, module):
    api = (site / "api" / "index.html").read_text()
    loaded = importlib.import_module(module)
    names = [name for name in loaded.__all__ if not inspect.ismodule(getattr(loaded, name))]  # submodules: their names
    assert names, f"{module} has no __all__"
    missing = [name for name in names if f'id="{module}.{name}"' not in api]
    assert not missing, f"docs/api.md leaves out {module}: {', '.join(missing)}"


def test_the_site_opens_in_a_browser_with_its_search(site):
    """Headless Chromium opens the API page from a web server: the reference is in the rendered page, the
    search box is there, and the page's scripts fetched the search worker and the index that holds the API's
    names (issue 36)."""
    import functools
    import http.server
    import json
    import threading

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.fail("chromium is not installed: scripts/setup.sh test installs it (apt-get install chromium)")
    requested = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format, *args):
            requested.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/api/?q=greedy_decode"
        page = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
                               "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    finally:
        server.shutdown()
        server.server_close()
    assert 'id="ctransformer.decode.greedy_decode"' in page and 'id="ctransformer.nn.Transformer"' in page
    assert 'class="md-search__input' in page, "no search box in the rendered page"
    assert any(path.startswith("/assets/javascripts/workers/search") for path in requested), requested
    assert "/search/search_index.json" in requested, requested
    index = json.loads((site / "search" / "search_index.json").read_text())
    assert any("greedy_decode" in doc["location"] for doc in index["docs"])
