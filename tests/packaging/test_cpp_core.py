"""The C++ core is a library of its own: it builds and trains a model with no Python involved,
on one process or, over MPI, on several (cpp/examples)."""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import ctransformer as ct

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is needed to build the C++ examples")


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """The core and the examples, built with CMake alone (no Python extension). The BLAS is found as a C++
    user finds it: the scipy-openblas32 wheel of the Python named by -DPython_EXECUTABLE (this one)."""
    build = tmp_path_factory.mktemp("cpp") / "build"
    configure = subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), "-DCTRANSFORMER_PYTHON=OFF",
                                "-DCTRANSFORMER_EXAMPLES=ON", "-DCMAKE_BUILD_TYPE=Release",
                                f"-DPython_EXECUTABLE={sys.executable}"],
                               check=True, capture_output=True, text=True)
    assert "ctransformer: BLAS is scipy-openblas32" in configure.stdout, configure.stdout
    subprocess.run(["cmake", "--build", str(build), "-j", str(os.cpu_count() or 1)], check=True,
                   capture_output=True)
    return build


def test_cpp_example_builds_without_python_and_learns(build):
    run = subprocess.run([str(build / "train_toy")], capture_output=True, text=True)
    lines = run.stdout.strip().splitlines()
    first = float(lines[0].split()[-1])
    final = float(lines[-1].split()[-1])
    assert run.returncode == 0, run.stdout + run.stderr
    assert final < 0.05 < first, run.stdout  # the loss fell from ~2.3 to below 0.05


@pytest.mark.skipif(not (ct.distributed.is_available() and shutil.which("mpirun")),
                    reason="needs MPI and mpirun (scripts/setup.sh installs Open MPI)")
def test_cpp_data_parallel_example(build):
    """Data-parallel training from C++ alone: 2 and 3 processes end where 1 does (train_data_parallel.cpp;
    the losses agree to 1e-4 relative: only the order of summation differs)."""
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    finals = {}
    for n in (1, 2, 3):
        run = subprocess.run([shutil.which("mpirun"), "-np", str(n), "--oversubscribe", str(build / "train_data_parallel")],
                             capture_output=True, text=True, env=env, timeout=300)
        assert run.returncode == 0, run.stdout + run.stderr
        final = run.stdout.strip().splitlines()[-1]
        assert final.startswith("final loss") and f"({n} processes" in final, run.stdout
        finals[n] = float(final.split()[2])
    assert finals[1] < 0.05
    assert finals[2] == pytest.approx(finals[1], rel=1e-4) and finals[3] == pytest.approx(finals[1], rel=1e-4)


def test_installed_library_builds_a_project_of_its_own(build, tmp_path):
    """cmake --install, then a separate CMake project that finds the package (find_package(ctransformer),
    ctransformer::core) builds cpp/examples/train_toy.cpp against the installed headers and library, and
    the program learns."""
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", str(build), "--prefix", str(prefix)], check=True, capture_output=True)
    assert (prefix / "include" / "ctransformer" / "tensor.hpp").is_file()
    assert list(prefix.glob("lib*/cmake/ctransformer/ctransformerConfig.cmake"))
    project = tmp_path / "app"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(app LANGUAGES CXX)\nset(CMAKE_CXX_STANDARD 17)\n"
        "find_package(ctransformer 0.1 REQUIRED)\n"
        f"add_executable(train_toy {ROOT / 'cpp' / 'examples' / 'train_toy.cpp'})\n"
        "target_link_libraries(train_toy PRIVATE ctransformer::core)\n")
    app_build = tmp_path / "app-build"
    for cmd in (["cmake", "-S", str(project), "-B", str(app_build), "-DCMAKE_BUILD_TYPE=Release",
                 f"-DCMAKE_PREFIX_PATH={prefix}"],
                ["cmake", "--build", str(app_build), "-j", str(os.cpu_count() or 1)]):
        run = subprocess.run(cmd, capture_output=True, text=True)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    run = subprocess.run([str(app_build / "train_toy")], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.strip().splitlines()
    assert float(lines[-1].split()[-1]) < 0.05 < float(lines[0].split()[-1]), run.stdout
