"""The BLAS under the core: which one it is, that its kernels fit the CPU (and a warning when they do
not), that the installed extension finds the user's copy, that the products we send it are right at the
shapes, strides and transposes the models use, and that the parity tests hold under every OpenBLAS kernel
core this CPU can run (DEVELOPING.md, "Parity tests and ReLU knife edges")."""
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import ctransformer as ct
from kernel_levels import at_level, kernel_at, levels_for

ROOT = pathlib.Path(__file__).resolve().parents[2]
CPU = ct.build_info()["cpu"]
BLAS = ct.build_info()["blas"]


def run_python(code, coretype=None, extra_env=None, args=(), timeout=600):
    """A fresh interpreter running `code` (or, with code=None, just `args`); OPENBLAS_CORETYPE (and
    OPENBLAS_L2_SIZE) as given: None removes them, so OpenBLAS picks its core by itself."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    env.update(extra_env or {})
    command = [sys.executable, *args] + (["-c", code] if code is not None else [])
    return subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT, timeout=timeout)


# --- what build_info and show_config report ----------------------------------------------------------------
def test_build_info_names_the_blas():
    assert BLAS["name"] == "OpenBLAS"
    assert BLAS["config"].startswith("OpenBLAS " + BLAS["version"])
    assert BLAS["core"] and BLAS["core"] in BLAS["config"]
    assert BLAS["threads"] == ct.get_num_threads()
    assert pathlib.Path(BLAS["library"]).is_file()
    assert BLAS["source"] == "scipy-openblas32"           # what pip install . links (pyproject.toml)
    import scipy_openblas32

    # the user's copy in site-packages, not a build environment's
    assert pathlib.Path(BLAS["library"]).resolve().parent == pathlib.Path(scipy_openblas32.get_lib_dir()).resolve()
    major, minor, patch = (int(x) for x in BLAS["version"].split(".")[:3])
    assert (major, minor, patch) >= (0, 3, 34)


def test_cpu_features_agree_with_proc_cpuinfo():
    """cpuid (the core's reading) against the kernel's flags: each feature the core reports is one the
    kernel lists (the core also requires the OS to save the registers, so it may report less; and under
    CTRANSFORMER_KERNEL_LEVEL, make test-levels, it reports what the capped level allows)."""
    from ctransformer._cpu_check import cpu_flags

    flags = cpu_flags()
    if flags is None or os.uname().machine != "x86_64":
        pytest.skip("needs /proc/cpuinfo on x86-64")
    for ours, theirs in [("avx2", "avx2"), ("fma", "fma"), ("avx512f", "avx512f"), ("avx512_vnni", "avx512_vnni"),
                         ("avx_vnni", "avx_vnni"), ("avx512_bf16", "avx512_bf16"), ("avx512_fp16", "avx512_fp16"),
                         ("amx_tile", "amx_tile"), ("amx_bf16", "amx_bf16"), ("amx_int8", "amx_int8")]:
        if CPU[ours]:
            assert theirs in flags, ours
        elif theirs in flags and ours.startswith("avx") and not CPU["level_cap"]:
            pytest.fail(f"{theirs} is in /proc/cpuinfo but the core did not detect it")
    level = {"avx512": "avx512bw", "avx2": "avx2"}.get(CPU["simd_level"])
    if level:
        assert level in flags


def test_show_config_prints_and_returns_the_same():
    config = ct.show_config(mode="dicts")
    assert config["BLAS"]["core"].startswith(BLAS["core"]) and config["BLAS"]["library"] == BLAS["library"]
    assert config["CPU"]["best SIMD level"] == CPU["simd_level"]
    loops = ct.build_info()["loops"]
    assert config["Kernels"] == {"level": f"{ct.kernel_level()} (this CPU runs {', '.join(ct.kernel_levels())})",
                                 "SIMD loops": f"{loops['simd']}, {loops['float_lanes']} floats a vector"
                                               + ("" if loops["fused_multiply_add"] else ", no FMA"),
                                 "bf16": ct.amp.bf16_kernel(), "int8": ct.quantization.int8_kernel()}
    assert config["Products"]["int8 Linear"].startswith(ct.quantization.int8_kernel() + "; split over threads")
    run = run_python("import ctransformer as ct; ct.show_config()")
    assert run.returncode == 0, run.stderr
    for line in ["BLAS:", "  name: OpenBLAS", f"  version: {BLAS['version']}", f"  library: {BLAS['library']}",
                 "CPU:", f"  best SIMD level: {CPU['simd_level']}", "  bf16 units:", "  int8 units:",
                 "Kernels:", f"  int8: {ct.quantization.int8_kernel()}", "Products:", "  float32 x W^T, 1-8 rows: "]:
        assert line in run.stdout, run.stdout
    with pytest.raises(ValueError, match="mode must be 'stdout' or 'dicts'"):
        ct.show_config(mode="yaml")


# --- the guard --------------------------------------------------------------------------------------------
needs_avx2 = pytest.mark.skipif(CPU["simd_level"] not in ("avx2", "avx512"),
                                reason="the guard acts only on CPUs with AVX2 or AVX-512")


@needs_avx2
def test_on_its_own_openblas_picks_a_core_of_this_cpus_level_and_nothing_warns():
    # The CPU as it is (no CTRANSFORMER_KERNEL_LEVEL: OpenBLAS's own choice is not capped by ours).
    code = ("import warnings; warnings.simplefilter('error')\n"
            "import ctransformer as ct; b = ct.build_info()\n"
            "print(b['blas']['core'], b['blas']['core_level'], b['cpu']['simd_level'])")
    run = run_python(code, extra_env={"CTRANSFORMER_KERNEL_LEVEL": ""})
    assert run.returncode == 0, run.stderr
    core, level, cpu_level = run.stdout.split()
    assert level == cpu_level, f"OpenBLAS picked {core} ({level}) on a CPU with {cpu_level}"


@needs_avx2
def test_a_generic_core_makes_the_guard_warn_and_the_users_choice_stands():
    """OPENBLAS_CORETYPE=Prescott, as a CPU unknown to the library would get: one warning at import naming
    the core, the CPU's level and the fix; OpenBLAS keeps the user's choice (the wheel names its oldest
    x86-64 core Katmai)."""
    code = "import ctransformer as ct; print('core', ct.build_info()['blas']['core'])"
    run = run_python(code, coretype="Prescott", args=("-W", "always"))
    assert run.returncode == 0, run.stderr
    core = run.stdout.split()[-1]
    assert core in ("Prescott", "Katmai", "Core2"), run.stdout
    assert run.stderr.count("BLASCoreWarning") == 1, run.stderr
    assert f"runs its {core} kernels (sse) on a CPU with {CPU['simd_level']}" in run.stderr, run.stderr
    assert "OPENBLAS_CORETYPE=Prescott is set in the environment" in run.stderr
    assert "Fix: unset OPENBLAS_CORETYPE, or set OPENBLAS_CORETYPE=" in run.stderr


@needs_avx2
def test_the_guard_words_an_unrecognised_cpu_differently():
    """Without OPENBLAS_CORETYPE in the environment, the advice is to set it (the library chose by itself).
    Shown by making OpenBLAS load with Prescott, then hiding the variable from the check."""
    code = ("import os, ctransformer as ct; os.environ.pop('OPENBLAS_CORETYPE'); "
            "print(ct._core._blas_core_advice())")
    run = run_python(code, coretype="Prescott", args=("-W", "ignore"))
    assert run.returncode == 0, run.stderr
    assert "This OpenBLAS does not recognise the CPU. Fix: export OPENBLAS_CORETYPE=" in run.stdout, run.stdout


# --- the installed package finds the user's OpenBLAS ----------------------------------------------------------
def installed_core():
    path = pathlib.Path(ct._core.__file__)
    if "site-packages" not in path.parts:
        pytest.skip("ctransformer is not imported from an installed package (a development build)")
    return path


def test_installed_extension_points_at_site_packages_not_the_build_env():
    """pip builds in a temporary environment that is gone by now: the RUNPATH must lead from the extension
    to site-packages/scipy_openblas32/lib, and nowhere into the build environment."""
    path = installed_core()
    if shutil.which("readelf") is None:
        pytest.skip("needs readelf")
    dynamic = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
    runpath = re.search(r"(?:RUNPATH|RPATH).*\[(.*)\]", dynamic)
    assert runpath and runpath.group(1) == "$ORIGIN/../scipy_openblas32/lib", dynamic
    assert "libscipy_openblas.so" in dynamic


def test_installed_extension_loads_its_blas_through_the_runpath_alone():
    """_core imported by file, without the package's __init__ (which imports scipy_openblas32 first)."""
    path = installed_core()
    code = (f"import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('ctransformer._core', {str(path)!r})\n"
            f"m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            f"assert 'scipy_openblas32' not in sys.modules\n"
            f"print(m.build_info()['blas']['library'])")
    run = run_python(code)
    assert run.returncode == 0, run.stderr
    assert pathlib.Path(run.stdout.strip()).resolve() == pathlib.Path(BLAS["library"]).resolve()


# --- the products we send it, at our shapes, strides and transposes --------------------------------------------
# (m, k, n): the base model's Linear at 100 rows and at 1 to 8 rows (decoding: kernels/fp32/few_rows.cpp for x W^T, W read
# once; sgemv at 1-2 rows where the kernel level has none), small and tiny shapes, odd sizes that leave vector tails, and products small enough for the straight
# loops (<= 8192 multiply-adds).
GEMM_SHAPES = [(100, 512, 2048), (100, 2048, 512), (1, 512, 512), (2, 512, 8000), (5, 256, 8000), (8, 2048, 512),
               (37, 256, 256), (50, 32, 39), (128, 64, 128), (7, 17, 4097), (3, 9, 70), (6, 33, 300),
               # blas.cpp's direct products at decoding's attention shapes (one query, d_k 64, a few keys): key
               # groups of 16, a last group of 4-15 and single keys (y); a row of 64 = 4 full vectors, and of
               # 40 (a partial last vector), kept in registers (dx; dW's transposed rows)
               (1, 64, 13), (1, 64, 21), (1, 64, 3), (2, 40, 19), (4, 64, 35)]


@pytest.mark.parametrize("m,k,n", GEMM_SHAPES)
def test_linear_and_its_gradients_against_float64(m, k, n):
    """y = x W^T + b, dx = g W, dW = g^T x, db = sum g, each entry held to the float32 error bound of a
    k-term (or m-term) sum, |err| <= 2 k u sum_p |a_ip b_pj| (u = 2^-24), whatever the summation order: no
    kernel-dependent luck. Seen: at most 0.12 of the bound (k = 17; 3e-4 to 3e-3 of it at the base shapes)."""
    rng = np.random.default_rng(m * 7919 + k * 31 + n)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    g = rng.standard_normal((m, n)).astype(np.float32)
    u = 2.0 ** -24
    X, W, B = ct.tensor(x, requires_grad=True), ct.tensor(w, requires_grad=True), ct.tensor(b, requires_grad=True)
    y = ct.functional.linear(X, W, B)
    (y * ct.tensor(g)).sum().backward()
    x64, w64, g64 = x.astype(np.float64), w.astype(np.float64), g.astype(np.float64)
    checks = [("y", y.numpy(), x64 @ w64.T + b, np.abs(x64) @ np.abs(w64).T + np.abs(b), k + 1),
              ("dx", X.grad.numpy(), g64 @ w64, np.abs(g64) @ np.abs(w64), n),
              ("dW", W.grad.numpy(), g64.T @ x64, np.abs(g64).T @ np.abs(x64), m),
              ("db", B.grad.numpy(), g64.sum(0), np.abs(g64).sum(0), m)]
    for name, got, exact, magnitude, terms in checks:
        bound = 2 * terms * u * magnitude + 1e-30
        ratio = np.abs(got - exact) / bound
        assert ratio.max() <= 1.0, f"{name}: error {ratio.max():.3g} x the float32 bound at {np.argmax(ratio)}"


@pytest.mark.parametrize("kernel_level", levels_for("few_rows"), indirect=True)
# Every row count from 1 to 8. With AVX2, 1 and 2 rows take four weight rows at a time: n = 2307 and 301 leave 3 and
# 1 columns over, k = 33 and 771 a vector's tail (AVX-512 reads one weight row at a time: k = 771 and 3079 leave 3 and
# 7 of 16 over, 7 rows' k = 17 one).
@pytest.mark.parametrize("m,k,n", [(3, 512, 512), (5, 256, 8000), (8, 2048, 512), (6, 33, 300), (1, 768, 2307),
                                   (2, 33, 301), (1, 771, 64), (2, 512, 8000), (4, 3079, 70), (7, 17, 513)])
def test_linear_of_a_few_rows_at_every_level(kernel_level, m, k, n):
    """The few-rows products (kernels/fp32/few_rows.cpp) by each kernel this CPU runs (AVX-512, AVX2, and OpenBLAS's
    sgemv at the portable level), held to the same bound as above."""
    assert kernel_at("few_rows").startswith({"portable": "OpenBLAS"}.get(kernel_level, kernel_level.split("_")[0]))
    test_linear_and_its_gradients_against_float64(m, k, n)


# With AVX-512, up to 6 rows in one pass of 64 outputs, then passes of 6-12 rows (13 = 6 + 7, 25 = 8 + 8 + 9, 32 = 10 +
# 11 + 11, 160 = 11s and 12s) over 32 outputs: n = 70, 39 and 114 leave a panel's last 6, 7 and 18 outputs.
PACKED_SHAPES = [(9, 256, 256), (32, 256, 8000), (160, 256, 1024), (33, 1024, 256), (13, 17, 70), (100, 64, 39), (40, 9, 1),
                 (3, 256, 256), (5, 256, 8000), (6, 512, 2048), (7, 17, 70), (8, 64, 39), (12, 40, 114), (25, 33, 50)]
# The product from which a weight's packed copy is read in a region: its second of 3 or more rows
# (kernels/weight_cache.cpp: packing costs about 2 products).
PACKED_FROM_USE = 2


def packed_kernel_expected():
    return kernel_at("packed") != "(not packed)"


@pytest.mark.parametrize("kernel_level", levels_for("packed"), indirect=True)
@pytest.mark.parametrize("m,k,n", PACKED_SHAPES)
def test_linear_with_packed_weights_against_float64(kernel_level, m, k, n):
    """Inside ct.decode.PackedWeights a product of 3 or more rows against a parameter goes to the packed kernel
    (kernels/fp32/packed.cpp) from the parameter's second product on, at each level with another kernel (AVX-512, AVX2;
    none at the portable level): held to the float32 bound
    of a k-term sum, |err| <= 2 (k + 1) u sum |x||w| + |b|, with alpha (the output projection's d_model^-1/2)
    and a bias; the region must hold the weight packed from that product on (PackedWeights.count: the kernel
    ran), and the products before and any outside the region are the BLAS's (or kernels/fp32/few_rows.cpp's). Shapes: decoding's batch 32 and beams, a beam at batch 1 (3-8 rows: one pass of
    5 or 6 rows, or 4 and the rest), columns not a multiple of 16 or 64, odd k."""
    rng = np.random.default_rng(m * 7919 + k * 31 + n)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    W, B, X = ct.tensor(w, requires_grad=True), ct.tensor(b, requires_grad=True), ct.tensor(x)
    alpha = float(np.float32(k ** -0.5))
    with ct.no_grad():
        plain = ct.functional.linear(X, W, B).numpy()
        with ct.decode.PackedWeights():
            before = [ct.functional.linear(X, W, B).numpy() for _ in range(PACKED_FROM_USE - 1)]
            assert ct.decode.PackedWeights.count == 0
            packed = ct.functional.linear(X, W, B).numpy()
            # Whether the packed kernel ran, whatever the BLAS's kernel gives: OpenBLAS's SkylakeX sgemm also
            # sums each output in order over k with one FMA a value, so at k <= 256 its bits equal the kernel's.
            assert ct.decode.PackedWeights.count == (1 if packed_kernel_expected() else 0)
            scaled = ct.functional.linear(ct.functional.scale(X, alpha), W, B).numpy()
        after = ct.functional.linear(X, W, B).numpy()
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    u = 2.0 ** -24
    for got, xs in ((packed, x64), (scaled, x64 * np.float64(np.float32(alpha)))):
        exact = xs @ w64.T + b
        bound = 2 * (k + 1) * u * (np.abs(xs) @ np.abs(w64).T + np.abs(b)) + 1e-30
        ratio = np.abs(got - exact) / bound
        assert ratio.max() <= 1.0, f"error {ratio.max():.3g} x the float32 bound at {np.argmax(ratio)}"
    for got in before:
        np.testing.assert_array_equal(got, plain)
    np.testing.assert_array_equal(after, plain)


def packed_product(m, k, n):
    """A parameter's product of m rows once it reads the packed copy (its last product in the region)."""
    rng = np.random.default_rng(m + k + n)
    X = ct.tensor(rng.standard_normal((m, k)).astype(np.float32))
    W = ct.tensor((rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32), requires_grad=True)
    with ct.no_grad(), ct.decode.PackedWeights():
        return [ct.functional.linear(X, W).numpy() for _ in range(PACKED_FROM_USE)][-1]


@pytest.mark.parametrize("kernel_level", levels_for("packed"), indirect=True)
def test_a_prompt_sized_product_counts_as_a_use(kernel_level):
    """A product of more rows than the packed kernel takes (1025 and up: a batch's prompt, through the BLAS) counts
    as the weight's first use in the region, so its next product of 3-1024 rows (the first decoding step) packs it and
    reads the copy (PackedWeights.count); never itself packing, however many there are. Its result is the BLAS's,
    bit for bit against the same product outside a region; the packed product is held to the float32 bound."""
    rng = np.random.default_rng(5)
    k, n = 64, 40
    W = ct.tensor((rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32), requires_grad=True)
    prompt = ct.tensor(rng.standard_normal((1100, k)).astype(np.float32))
    x = rng.standard_normal((32, k)).astype(np.float32)
    with ct.no_grad():
        plain = ct.functional.linear(prompt, W).numpy()
        with ct.decode.PackedWeights():
            for _ in range(3):
                np.testing.assert_array_equal(ct.functional.linear(prompt, W).numpy(), plain)
                assert ct.decode.PackedWeights.count == 0
            step = ct.functional.linear(ct.tensor(x), W).numpy()
            assert ct.decode.PackedWeights.count == (1 if packed_kernel_expected() else 0)
    x64, w64 = x.astype(np.float64), W.numpy().astype(np.float64)
    bound = 2 * (k + 1) * 2.0 ** -24 * (np.abs(x64) @ np.abs(w64).T) + 1e-30
    assert (np.abs(step - x64 @ w64.T) <= bound).all()


def test_packed_kernels_give_the_same_bits():
    """The AVX2 packed kernel (what a CPU without AVX-512 runs) gives the AVX-512 kernel's bits at every packed
    shape: both sum each output in order over k, one fused multiply-add per value (each is held to float64's
    bound above)."""
    levels = [level for level in levels_for("packed") if level != "portable"]
    if len(levels) < 2:
        pytest.skip(f"one packed kernel on this CPU ({levels})")
    for shape in PACKED_SHAPES:
        results = []
        for level in levels:
            with at_level(level):
                results.append(packed_product(*shape))
        for level, got in zip(levels[1:], results[1:]):
            np.testing.assert_array_equal(got, results[0], err_msg=f"shape {shape}: {level} against {levels[0]}")


def test_packed_weights_at_the_portable_level_give_the_blas_result():
    """At the portable level the region changes nothing (what a CPU without AVX2 does)."""
    rng = np.random.default_rng(0)
    x = ct.tensor(rng.standard_normal((32, 256)).astype(np.float32))
    w = ct.tensor(rng.standard_normal((512, 256)).astype(np.float32), requires_grad=True)
    with at_level("portable"), ct.no_grad():
        a = ct.functional.linear(x, w).numpy()
        with ct.decode.PackedWeights():
            ct.functional.linear(x, w)
            b = ct.functional.linear(x, w).numpy()
            assert ct.decode.PackedWeights.count == 0
    np.testing.assert_array_equal(a, b)


def test_packed_and_bf16_copies_live_in_one_cache_each_for_its_own_region():
    """A weight can have both copies on one thread (kernels/weight_cache.cpp): an inference product in a bf16
    region makes its bf16 copy, float32 products inside PackedWeights (autocast switched off there) its packed
    one. Each kind goes when its own region ends, and not when the other's does."""
    if not packed_kernel_expected():
        pytest.skip("no packed kernel at this kernel level")
    from ctransformer import amp

    rng = np.random.default_rng(1)
    x = ct.tensor(rng.standard_normal((8, 64)).astype(np.float32))
    w = ct.tensor(rng.standard_normal((96, 64)).astype(np.float32), requires_grad=True)
    with ct.no_grad(), ct.autocast():
        ct.functional.linear(x, w)
        assert amp._amp.autocast_cache_size() == 1
        with ct.decode.PackedWeights():
            with ct.autocast(enabled=False):
                for _ in range(PACKED_FROM_USE):
                    ct.functional.linear(x, w)
            assert ct.decode.PackedWeights.count == 1 and amp._amp.autocast_cache_size() == 1
        assert ct.decode.PackedWeights.count == 0 and amp._amp.autocast_cache_size() == 1
        with ct.decode.PackedWeights():  # a new region packs afresh
            assert ct.decode.PackedWeights.count == 0
    assert amp._amp.autocast_cache_size() == 0


@pytest.mark.parametrize("m,k,n", [(3, 256, 256), (9, 256, 256), (32, 256, 1000), (13, 17, 70), (40, 9, 1)])
def test_emulated_bf16_products_read_a_packed_copy_of_the_rounded_weight(m, k, n):
    """Under autocast where bf16 is emulated (no bf16 units: a float32 product of bf16-rounded operands), a product
    of 3 to 1024 rows inside PackedWeights reads a packed copy of the weight's rounded values, x rounded first: from
    the weight's second product on (PackedWeights.count), bit for bit the float32 packed product of the operands
    rounded by round_to_bf16 beforehand (the same kernel on the same values), and within the float32 bound of a k-term
    sum of the rounded operands. Forced to the emulated kernel, so that it runs on any CPU."""
    if not packed_kernel_expected():
        pytest.skip("no packed kernel at this kernel level")
    from ctransformer import amp

    rng = np.random.default_rng(m + 3 * k + n)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    xr, wr = (amp.widen_bf16(amp.round_to_bf16(v)) for v in (x, w))   # the operands rounded, as float32
    W, B = ct.tensor(w, requires_grad=True), ct.tensor(b, requires_grad=True)
    Wr = ct.tensor(wr, requires_grad=True)
    amp.set_bf16_kernel("emulated")
    try:
        with ct.no_grad(), ct.decode.PackedWeights():
            with ct.autocast():
                for _ in range(PACKED_FROM_USE - 1):
                    ct.functional.linear(ct.tensor(x), W, B)
                assert ct.decode.PackedWeights.count == 0
                got = ct.functional.linear(ct.tensor(x), W, B).numpy()
                assert ct.decode.PackedWeights.count == 1
            for _ in range(PACKED_FROM_USE):
                want = ct.functional.linear(ct.tensor(xr), Wr, B).numpy()
            assert ct.decode.PackedWeights.count == 2
    finally:
        amp.set_bf16_kernel("auto")
    np.testing.assert_array_equal(got, want)
    x64, w64 = xr.astype(np.float64), wr.astype(np.float64)
    exact = x64 @ w64.T + b
    bound = 2 * (k + 1) * 2.0**-24 * (np.abs(x64) @ np.abs(w64).T + np.abs(b)) + 1e-30
    assert (np.abs(got - exact) <= bound).all()


def test_products_of_more_than_1024_rows_are_not_packed():
    """Above kPackedMaxRows (1024: a GPT's prompts at batch 32) OpenBLAS's sgemm is as fast or faster than the packed
    kernel (kernels/split.hpp): no copy is made for them, in float32 or emulated bf16."""
    from ctransformer import amp

    rng = np.random.default_rng(4)
    x = ct.tensor(rng.standard_normal((1025, 32)).astype(np.float32))
    w = ct.tensor(rng.standard_normal((48, 32)).astype(np.float32), requires_grad=True)
    amp.set_bf16_kernel("emulated")
    try:
        with ct.no_grad(), ct.decode.PackedWeights():
            for bf16 in (False, True):
                with ct.autocast(enabled=bf16):
                    for _ in range(PACKED_FROM_USE + 1):
                        ct.functional.linear(x, w)
            assert ct.decode.PackedWeights.count == 0
            for bf16 in (False, True):   # the same weight at 1024 rows is packed, in each kind
                with ct.autocast(enabled=bf16):
                    for _ in range(PACKED_FROM_USE):
                        ct.functional.linear(ct.tensor(x.numpy()[:1024]), w)
            assert ct.decode.PackedWeights.count == (2 if packed_kernel_expected() else 0)
    finally:
        amp.set_bf16_kernel("auto")


# --- the parity tests under every kernel core -------------------------------------------------------------------
PARITY = ["tests/nn/test_transformer_small_pre_norm.py", "tests/nn/test_transformer_post_norm.py", "tests/nn/test_nn_layers.py",
          "tests/nn/test_relu_knife_edges.py"]
# OPENBLAS_CORETYPE values to try, with what each needs of the CPU (/proc/cpuinfo). The wheel maps some to
# others (Zen -> Haswell, Cooperlake -> SkylakeX, Prescott -> Katmai); each core actually run is tested once.
CORE_CANDIDATES = [("SkylakeX", {"avx512f", "avx512bw", "avx512vl", "avx512dq"}), ("Cooperlake", {"avx512_bf16"}),
                   ("SapphireRapids", {"amx_bf16", "avx512_fp16"}), ("Haswell", {"avx2", "fma"}),
                   ("Zen", {"avx2", "fma"}), ("Sandybridge", {"avx"}), ("Prescott", {"pni"})]


def runnable_cores():
    from ctransformer._cpu_check import cpu_flags

    flags = cpu_flags() or set()
    asked = [name for name, need in CORE_CANDIDATES if need <= flags]
    cores = {}
    for name in asked:
        run = run_python("import ctransformer as ct; print(ct.build_info()['blas']['core'])", coretype=name,
                         args=("-W", "ignore"))
        assert run.returncode == 0, run.stderr
        cores.setdefault(run.stdout.strip(), name)
    return cores  # {core run: OPENBLAS_CORETYPE that gives it}


# The cores `make test-levels` runs these tests under already (scripts/test_levels.sh: Haswell beside the
# x86-64-v3 build, Prescott, which the wheel runs as Katmai, beside the baseline), and the one this suite
# itself runs under: each is run once, not again here.
CORES_OF_THE_LEVEL_RUNS = {"Haswell", "Katmai"}


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="OpenBLAS's x86-64 cores")
def test_parity_tests_pass_under_every_kernel_core_this_cpu_runs():
    """Every model and layer parity test (float32 against torch, gradients also against float64) in a fresh
    process per OpenBLAS core this CPU runs that no other run of the suite covers, the first of them with
    OpenBLAS on one thread: none may depend on the summation order."""
    cores = runnable_cores()
    assert len(cores) >= 2, cores   # at least two different kernels, or this proves nothing
    own = ct.build_info()["blas"]["core"]
    others = [asked for core, asked in cores.items() if core != own and core not in CORES_OF_THE_LEVEL_RUNS]
    if not others:
        pytest.skip(f"every core this CPU runs ({', '.join(cores)}) is covered by this run or make test-levels")
    failures = []
    for i, asked in enumerate(others):
        extra = {"OPENBLAS_NUM_THREADS": "1"} if i == 0 else {}
        run = run_python(None, coretype=asked, extra_env=extra, timeout=1200,
                         args=("-m", "pytest", "-q", "-p", "no:cacheprovider", "-W",
                               "ignore::ctransformer.BLASCoreWarning", *PARITY))
        if run.returncode != 0 or not re.search(r"\d+ passed", run.stdout):
            failures.append(f"OPENBLAS_CORETYPE={asked} {extra}:\n{run.stdout[-3000:]}\n{run.stderr[-1000:]}")
    assert not failures, "\n".join(failures)
