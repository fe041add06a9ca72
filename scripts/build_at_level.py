"""Build the package for one CPU level into a folder of its own, beside the installed one.

    python scripts/build_at_level.py --arch x86-64-v3 --out build/level-v3
    PYTHONPATH=build/level-v3/pkg python -c "import ctransformer as ct; print(ct.build_info())"

--arch default is what `pip install .` builds (CTRANSFORMER_NATIVE=OFF: plain x86-64 on x86-64, the
kernels chosen at run time); --arch native is -march=native (CTRANSFORMER_NATIVE=ON); any other value is
passed to -march. The benchmarks use it to measure what a level buys (benchmarks/simd_levels.py), the
sanitizers to build an instrumented copy.

--sanitize address|thread builds the same under ASan+UBSan or TSan (CTRANSFORMER_SANITIZE), for
scripts/sanitize.sh (make sanitize); such a package needs the runtime in LD_PRELOAD to import.
"""
import argparse
import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def build(arch, out, sanitize=""):
    """CMake-build the extension at `arch` (under `sanitize`, if given) into out/build; returns
    out/pkg, which holds a copy of the Python package with that extension (put it first on
    PYTHONPATH)."""
    import pybind11

    out = pathlib.Path(out).resolve()
    package = out / "pkg" / "ctransformer"
    if package.exists():
        shutil.rmtree(package)
    shutil.copytree(ROOT / "python" / "ctransformer", package,
                    ignore=shutil.ignore_patterns("_core*.so", "_build_config.py", "__pycache__"))
    level = ["-DCTRANSFORMER_NATIVE=ON"] if arch == "native" else ["-DCTRANSFORMER_NATIVE=OFF",
                                                                   f"-DCTRANSFORMER_ARCH={'' if arch == 'default' else arch}"]
    configure = ["cmake", "-S", str(ROOT), "-B", str(out / "build"), "-DCMAKE_BUILD_TYPE=Release", *level,
                 f"-DCTRANSFORMER_PYTHON_OUTPUT_DIR={package}", f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
                 f"-DPython_EXECUTABLE={sys.executable}", f"-DCTRANSFORMER_SANITIZE={sanitize}"]
    if sanitize:
        # -O1, as the sanitizers' own docs advise: at -O3 the instrumented pybind11 bindings took 50-130 s a
        # file (ASan: 1335 s of compiling in all, 690 s of CI's time on 2 cores); the checks are the same.
        configure.append("-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG")
    if shutil.which("ninja") and not (out / "build" / "CMakeCache.txt").exists():
        configure += ["-G", "Ninja"]
    for cmd in [configure, ["cmake", "--build", str(out / "build"), "-j", str(os.cpu_count() or 1)]]:
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return out / "pkg"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", required=True, help="native, default, or a -march value such as x86-64-v3")
    p.add_argument("--out", required=True, help="folder for the build and the package copy")
    p.add_argument("--sanitize", default="", choices=["", "address", "thread"],
                   help="instrument with ASan+UBSan (address) or TSan (thread)")
    a = p.parse_args()
    print(build(a.arch, a.out, a.sanitize))


if __name__ == "__main__":
    main()
