"""The type stubs of the compiled module: current, shipped, and what mypy makes of the README.

python/ctransformer/_core/**/*.pyi are pybind11-stubgen's view of the extension's signatures
(scripts/generate_stubs.py). These tests regenerate them from the extension being imported and compare,
check that the imported package carries them and py.typed (for an installed package: the wheel does),
and run mypy on the stubs, on the README's Python example (it must pass) and on a snippet with a wrong
keyword, a wrong argument type and a misspelt method (mypy must name each).
"""
import difflib
import os
import pathlib
import re
import site
import subprocess
import sys

import pytest

pytest.importorskip("mypy", reason="mypy is not installed (pip install '.[test]')")
pytest.importorskip("pybind11_stubgen", reason="pybind11-stubgen is not installed (pip install '.[test]')")

import ctransformer  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
COMMITTED = REPO / "python" / "ctransformer" / "_core"
PACKAGE = pathlib.Path(ctransformer.__file__).resolve().parent  # the ctransformer under test
REGENERATE = "rebuild, then run `python scripts/generate_stubs.py` and commit python/ctransformer/_core/"


def _stub_texts(root):
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*.pyi"))}


def _installed():
    """Whether the ctransformer under test sits in site-packages (pip install .) rather than a source tree."""
    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    return any(PACKAGE.parent == pathlib.Path(d).resolve() for d in dirs)


@pytest.fixture(scope="module")
def mypy(tmp_path_factory):
    """Run mypy in a clean folder on the ctransformer under test; returns (exit code, output)."""
    cache = tmp_path_factory.mktemp("mypy_cache")
    env = dict(os.environ)
    env.pop("MYPYPATH", None)
    if not _installed():  # a source tree: point mypy at it (it does not read PYTHONPATH)
        env["MYPYPATH"] = str(PACKAGE.parent)

    def run(*args, cwd):
        # --follow-imports=silent: the package's own .py files are analysed for their types but not
        # reported on, as for any installed package; the files named here and -p packages are.
        cmd = [sys.executable, "-m", "mypy", "--no-error-summary", "--cache-dir", str(cache),
               "--follow-imports=silent", "--show-error-codes", *args]
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        return proc.returncode, proc.stdout + proc.stderr

    return run


def test_stubs_match_the_extension(tmp_path):
    """Regenerated from the extension being imported, the stubs equal the committed ones."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "generate_stubs.py"), "--out", str(tmp_path),
         "--import-from", str(PACKAGE.parent)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fresh = _stub_texts(tmp_path / "ctransformer" / "_core")
    committed = _stub_texts(COMMITTED)
    assert "__init__.pyi" in fresh and "nn/__init__.pyi" in fresh
    assert sorted(fresh) == sorted(committed), f"stub files differ: {sorted(fresh)} vs {sorted(committed)}; {REGENERATE}"
    for name in fresh:
        if fresh[name] != committed[name]:
            made_by = [text.split("\n", 1)[0] for text in (committed[name], fresh[name])]
            if made_by[0] != made_by[1]:  # another pybind11-stubgen: regenerate with the pinned one
                pytest.fail(f"stub {name}: committed '{made_by[0]}', regenerated '{made_by[1]}'; "
                            f"pip install '.[test]' (pins pybind11-stubgen), then {REGENERATE}")
            diff = "".join(difflib.unified_diff(committed[name].splitlines(True), fresh[name].splitlines(True),
                                                f"committed/{name}", f"regenerated/{name}"))
            pytest.fail(f"stale stub {name}; {REGENERATE}\n{diff[:4000]}")


def test_package_ships_stubs_and_py_typed():
    """The imported package (for an installed one, the wheel) has py.typed and the committed stubs."""
    assert (PACKAGE / "py.typed").is_file(), f"no py.typed in {PACKAGE}"
    assert _stub_texts(PACKAGE / "_core") == _stub_texts(COMMITTED)


def test_stubs_check(mypy, tmp_path):
    code, out = mypy("-p", "ctransformer._core", cwd=tmp_path)
    assert code == 0, out


def _readme_python_blocks():
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    assert blocks, "the README has a Python example"
    return blocks


def test_mypy_accepts_the_readme_example(mypy, tmp_path):
    files = []
    for i, block in enumerate(_readme_python_blocks()):
        files.append(tmp_path / f"readme_{i}.py")
        # reveal_type proves mypy sees the stubs' types, not Any, through ctransformer's re-exports.
        files[-1].write_text(block + "\nreveal_type(model)\nreveal_type(loss)\nreveal_type(optimizer)\n" if i == 0
                             else block)
    code, out = mypy(*[f.name for f in files], cwd=tmp_path)
    assert code == 0, out
    assert 'Revealed type is "ctransformer._core.nn.Transformer"' in out, out
    assert 'Revealed type is "ctransformer._core.Tensor"' in out, out
    assert 'Revealed type is "ctransformer._core.optim.Adam"' in out, out


BAD = '''\
import numpy as np
import ctransformer as ct

model = ct.nn.Transformer(n_src_vocab=11, n_trg_vocab=11, src_pad_idx=0, trg_pad_idx=0, n_layers=2)
model = ct.nn.Transformer(n_src_vocab=11, n_trg_vocab=11, src_pad_idx=0, trg_pad_idx=0, n_layer=2)
model = ct.nn.Transformer(11, 11, 0, 0, d_model="128")
loss = ct.functional.cross_entropy(model(np.ones((2, 3), np.int64), np.ones((2, 3), np.int64)), np.zeros(6, np.int64))
loss.bakward()
opt = ct.optim.Adam(model.parameters(), lr="fast")
'''


def test_mypy_rejects_wrong_arguments(mypy, tmp_path):
    (tmp_path / "bad.py").write_text(BAD)
    code, out = mypy("bad.py", cwd=tmp_path)
    assert code == 1, out
    errors = {}
    for line in re.findall(r"^bad\.py:(\d+): error: (.*)$", out, re.M):
        errors.setdefault(int(line[0]), []).append(line[1])
    assert sorted(errors) == [5, 6, 8, 9], out  # lines 4 and 7 are right
    assert any('Unexpected keyword argument "n_layer"' in e and '"n_layers"' in e for e in errors[5]), out
    assert any('"str"' in e for e in errors[6]), out
    assert any('"Tensor" has no attribute "bakward"' in e for e in errors[8]), out
    assert any('"lr"' in e and '"str"' in e for e in errors[9]), out
