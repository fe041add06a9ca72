"""The core builds for every CPU it may meet, not only the one it was written on.

The default build is for the x86-64 baseline, with every kernel level compiled into it and chosen at run
time (`make test` builds it, runs each level this CPU has, and runs it under qemu on CPUs without AVX and
without AVX-512). A user may still build the whole core for a higher level (CTRANSFORMER_ARCH, or
CTRANSFORMER_NATIVE=ON), and the sources then take other branches of cpp/src/simd.hpp: code behind another
level's macros is never compiled where it is written. So the files that use SIMD are compiled here for
the x86-64 levels above the baseline (and for aarch64 when a cross compiler is installed), whatever this
machine's CPU.
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SRC = ROOT / "cpp" / "src"
INCLUDE = ROOT / "cpp" / "include"
CXX = shutil.which("g++")

# make test builds the default (x86-64) whole; the levels a user may ask for with CTRANSFORMER_ARCH or
# CTRANSFORMER_NATIVE are compiled here.
X86_LEVELS = ["x86-64-v2", "x86-64-v3", "x86-64-v4"]

# What marks a file as CPU-specific: our SIMD helpers, or intrinsics used directly.
SIMD_MARKERS = re.compile(r"simd\.hpp|per_level\.hpp|random_bits\.hpp|immintrin|__AVX|__SSE|_mm(256|512)?_|__m(128|256|512)")
# An intrinsic or one of its vector types.
INTRINSIC = re.compile(r"\b(_mm(256|512)?_\w+|__m(128|256|512)[di]?|__mmask\d+|_pdep_u\d+|_pext_u\d+)\b")
# A preprocessor condition that only holds on x86.
X86_GUARD = re.compile(r"__(AVX\w*|SSE\w*|FMA|BMI2?|x86_64)__|__i386__|_M_X64")


def simd_sources():
    """Every .cpp whose code depends on the target's instruction set, the BLAS door and the pool included."""
    files = {SRC / "blas.cpp", SRC / "runtime" / "parallel.cpp", SRC / "build_info.cpp", SRC / "runtime" / "cpu_features.cpp"}
    for path in SRC.rglob("*.cpp"):
        if SIMD_MARKERS.search(path.read_text()):
            files.add(path)
    return sorted(files)


def blas_flags():
    """blas.cpp declares its CBLAS calls itself; the wheel's symbol prefix, as pip builds set it."""
    return ["-DCT_BLAS_PREFIX=scipy_"]


def compile_all(compiler, flags, files, out_dir):
    """Compile each file to object code in out_dir (-O0 still inlines the intrinsics' always_inline
    wrappers, so a target mismatch fails as it would in a real build). Returns the failures. The SIMD loops
    (kernels/simd/, built once per level by CMake) are compiled as the portable level of that -march.
    Through the test targets' compiler launcher when one is set (the Makefile's: ccache), as CMake's builds."""
    launcher = [os.environ["CMAKE_CXX_COMPILER_LAUNCHER"]] if os.environ.get("CMAKE_CXX_COMPILER_LAUNCHER") else []

    def one(numbered):
        number, path = numbered
        cmd = [*launcher, compiler, "-std=gnu++17", "-c", "-O0", "-w", *flags, "-DCT_LOOP_LEVEL=portable",
               "-DCT_LOOP_PORTABLE=1", "-I", str(INCLUDE), "-I", str(SRC),
               str(path), "-o", str(out_dir / f"{number}.o")]
        run = subprocess.run(cmd, capture_output=True, text=True)
        return None if run.returncode == 0 else f"{path.relative_to(ROOT)}:\n{run.stderr[-2000:]}"

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return [f for f in pool.map(one, enumerate(files)) if f]


def test_the_simd_sources_are_found():
    names = {p.name for p in simd_sources()}
    # The SIMD loops of every level (kernels/simd/), and both users of the dropout hash.
    assert {"simd.hpp"} <= {p.name for p in SRC.glob("*.hpp")}
    loops = {p.name for p in simd_sources() if p.parent == SRC / "kernels" / "simd"}
    assert {"softmax.cpp", "layer_norm.cpp", "activation.cpp", "attention.cpp", "adam.cpp", "cross_entropy.cpp",
            "search.cpp", "small_gemm.cpp", "pointwise.cpp", "arithmetic.cpp"} <= loops
    assert {"dropout.cpp", "blas.cpp"} <= names


@pytest.mark.skipif(CXX is None, reason="g++ is needed")
@pytest.mark.parametrize("level", X86_LEVELS)
def test_simd_sources_compile_for_every_x86_64_level(level, tmp_path):
    if not (sys.platform.startswith("linux") and os.uname().machine == "x86_64"):
        pytest.skip("x86-64 levels are compiled on an x86-64 host")
    failures = compile_all(CXX, [f"-march={level}", *blas_flags()], simd_sources(), tmp_path)
    assert not failures, f"-march={level}:\n" + "\n".join(failures)


def test_every_intrinsic_sits_behind_an_x86_guard():
    """No x86 intrinsic outside an #if on an x86 feature macro: an aarch64 build must never see one.
    (The aarch64 compile below proves the same where a cross compiler is installed.)"""
    offenders = []
    for path in sorted([*SRC.rglob("*.cpp"), *SRC.rglob("*.hpp"), *INCLUDE.rglob("*.hpp")]):
        guards = []  # one entry per open #if: does it (or an enclosing one) require x86?
        for number, line in enumerate(path.read_text().splitlines(), 1):
            directive = line.strip()
            if re.match(r"#\s*if", directive):
                guards.append(bool(X86_GUARD.search(directive)))
            elif re.match(r"#\s*(elif|else)", directive):
                if guards:
                    guards[-1] = bool(X86_GUARD.search(directive))
            elif re.match(r"#\s*endif", directive):
                if guards:
                    guards.pop()
            elif INTRINSIC.search(line.split("//")[0]) and not any(guards):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "x86 intrinsics outside an x86 guard:\n" + "\n".join(offenders)


def test_the_guard_check_can_fail(tmp_path, monkeypatch):
    """The check above flags an unguarded intrinsic (so it is not vacuous)."""
    fake_src = tmp_path / "src"
    fake_src.mkdir()
    (fake_src / "k.cpp").write_text("#if defined(__AVX2__)\nauto a = _mm256_setzero_ps();\n#else\n"
                                    "auto b = _mm_setzero_ps();\n#endif\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", fake_src)
    monkeypatch.setattr(sys.modules[__name__], "INCLUDE", tmp_path / "none")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    with pytest.raises(AssertionError, match=r"k.cpp:4"):
        test_every_intrinsic_sits_behind_an_x86_guard()


AARCH64_CXX = shutil.which("aarch64-linux-gnu-g++")


@pytest.mark.skipif(AARCH64_CXX is None, reason="no aarch64 cross compiler (apt-get install g++-aarch64-linux-gnu)")
def test_the_core_compiles_for_aarch64(tmp_path):
    """Every source of the core (cpp/src: the runtime, ops, layers, kernels with their NEON loops at the one
    aarch64 level) compiles with the cross compiler, to object code. Linking needs an aarch64 OpenBLAS and is
    not done here. (MPI's headers are the host's: the distributed sources compile without MPI, as a build
    without it does.)"""
    # The cross compiler has its own C library; only the header-only libraries come from the host. Their links
    # sit in a folder of fixed name under build/, so a compiler cache sees the same command each run.
    headers = ROOT / "build" / "aarch64-host-headers"
    headers.mkdir(parents=True, exist_ok=True)
    for name in ["xtensor", "xsimd", "xtl"]:
        if (pathlib.Path("/usr/include") / name).exists() and not (headers / name).exists():
            (headers / name).symlink_to(pathlib.Path("/usr/include") / name)
    failures = compile_all(AARCH64_CXX, ["-march=armv8-a", "-isystem", str(headers), *blas_flags()],
                           sorted(SRC.rglob("*.cpp")), tmp_path)
    assert not failures, "aarch64:\n" + "\n".join(failures)


# --- a build copied to another CPU -------------------------------------------------------------------

def test_this_build_records_what_it_needs_and_this_cpu_has_it():
    from ctransformer import _build_config, _cpu_check

    import ctransformer as ct

    assert _build_config.MARCH == ct.build_info()["march"]
    if ct.build_info()["float_lanes"] == 16 and os.uname().machine == "x86_64":
        assert "avx512f" in _build_config.CPU_FLAGS
    assert _cpu_check.missing_features(_build_config.CPU_FLAGS, _cpu_check.cpu_flags()) == []


def test_import_on_a_cpu_without_the_builds_features_is_a_clear_import_error():
    """A build for -march=native on an AVX-512 machine (its record stands in for this build's) is imported in a
    fresh process whose CPU seems to have only SSE2: the import stops before the extension loads, naming what
    is missing and how to rebuild (not a SIGILL later on)."""
    code = """
import importlib.util, sys, types
record = types.ModuleType("ctransformer._build_config")
record.MARCH, record.CPU_FLAGS, record.BLAS = "native", ("avx2", "fma", "avx512f"), "scipy-openblas32"
sys.modules["ctransformer._build_config"] = record
spec = importlib.util.find_spec("ctransformer")
path = spec.submodule_search_locations[0] + "/_cpu_check.py"
check = importlib.util.spec_from_file_location("ctransformer._cpu_check", path)
module = importlib.util.module_from_spec(check)
check.loader.exec_module(module)
module.cpu_flags = lambda: {"sse", "sse2"}
module.platform.machine = lambda: "x86_64"
sys.modules["ctransformer._cpu_check"] = module
try:
    import ctransformer
except ImportError as e:
    print("ImportError:", e)
    print("core loaded:", "ctransformer._core" in sys.modules)
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "ImportError: this build of ctransformer was compiled for another CPU (-march=native)" in run.stdout, run.stdout
    assert "avx2, fma, avx512f" in run.stdout and "without CTRANSFORMER_NATIVE=ON" in run.stdout
    assert "core loaded: False" in run.stdout


@pytest.mark.parametrize("text,name", [
    ("processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t: fpu\n", "AMD EPYC 7B13"),
    # a Graviton2's /proc/cpuinfo (per core; no model name on aarch64)
    ("processor\t: 0\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd asimddp\nCPU implementer\t: 0x41\n"
     "CPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\nCPU revision\t: 1\n\n"
     "processor\t: 1\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n", "ARM Neoverse-N1"),
    ("processor\t: 0\nCPU implementer\t: 0x51\nCPU part\t: 0x801\n", "aarch64 implementer 0x51 part 0x801"),
    ("processor\t: 0\nCPU implementer\t: 0x41\n", None),
])
def test_cpu_model_names_x86_and_arm_cores(tmp_path, text, name):
    """The model name messages and figures give: x86's `model name`; on aarch64 the core its implementer and
    part numbers name (a Graviton2 is a Neoverse-N1), or the numbers themselves."""
    from ctransformer import _cpu_check

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(text)
    assert _cpu_check.cpu_model(str(cpuinfo)) == name
