"""The C++ core is a library of its own: it builds and trains a model with no Python involved."""
import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is needed to build the C++ example")
def test_cpp_example_builds_without_python_and_learns(tmp_path):
    build = tmp_path / "build"
    subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), "-DCTRANSFORMER_PYTHON=OFF",
                    "-DCTRANSFORMER_EXAMPLES=ON", "-DCMAKE_BUILD_TYPE=Release"],
                   check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build), "-j", str(os.cpu_count() or 1)], check=True,
                   capture_output=True)
    run = subprocess.run([str(build / "train_toy")], capture_output=True, text=True)
    lines = run.stdout.strip().splitlines()
    first = float(lines[0].split()[-1])
    final = float(lines[-1].split()[-1])
    assert run.returncode == 0, run.stdout + run.stderr
    assert final < 0.05 < first, run.stdout  # the loss fell from ~2.3 to below 0.05
