"""The kernel level: one process runs the kernels a smaller CPU would pick.

ct.set_kernel_level changes it at run time (the tests of the kernels run every level this way, through
kernel_levels.py); CTRANSFORMER_KERNEL_LEVEL caps the CPU's features for the whole process, read once, so
each of its cases runs in a fresh process. The cap is what `make
test-levels` sets beside the build of the same level, so an AVX-512 machine runs an AVX2-only CPU's int8,
bf16, packed and few-rows kernels; these tests check that every run-time choice obeys it.
"""
import json
import os
import subprocess
import sys

import pytest

import ctransformer as ct

CPU = ct.build_info()["cpu"]
RANK = {"sse2": 0, "sse4.2": 1, "avx": 1, "avx2": 2, "avx512": 3}

PROBE = """
import json, ctransformer as ct
from ctransformer import quantization as q, amp
print(json.dumps({"cpu": ct.build_info()["cpu"], "int8": q.int8_kernels_available(), "int8_now": q.int8_kernel(),
                  "bf16": amp.bf16_kernel(), "level": ct.kernel_level(), "levels": ct.kernel_levels()}))
"""


def probe(level, code=PROBE):
    env = dict(os.environ)
    env.pop("CTRANSFORMER_KERNEL_LEVEL", None)
    if level is not None:
        env["CTRANSFORMER_KERNEL_LEVEL"] = level
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.splitlines()[-1])


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 levels")
@pytest.mark.parametrize("level,simd,int8", [("x86-64", "sse2", {"portable"}),
                                             ("x86-64-v2", "sse4.2", {"portable"}),
                                             ("x86-64-v3", "avx2", {"avx2", "portable"}),
                                             ("x86-64-v4", "avx512", {"avx2", "portable"})])
def test_a_level_caps_every_run_time_choice(level, simd, int8):
    got, real = probe(level), probe(None)["cpu"]     # (the CPU as it is, whatever this process runs under)
    cpu = got["cpu"]
    assert cpu["level_cap"] == level and real["level_cap"] == ""
    # Never more than the CPU has, never more than the level allows.
    assert RANK[cpu["simd_level"]] == min(RANK[simd], RANK[real["simd_level"]])
    for extension in ["avx512_vnni", "avx_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8"]:
        assert cpu[extension] is False, extension
    assert cpu["avx512f"] == (level == "x86-64-v4" and real["avx512f"])
    assert cpu["avx2"] == (RANK[simd] >= 2 and real["avx2"])
    assert set(got["int8"]) <= int8 and "portable" in got["int8"]
    assert got["int8_now"] == got["int8"][0]          # auto: the best the capped CPU has
    assert got["bf16"] == "emulated"
    assert got["level"] == got["levels"][0] == {0: "portable", 1: "portable", 2: "avx2", 3: "avx512"}[RANK[cpu["simd_level"]]]


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 levels")
@pytest.mark.parametrize("level", ["portable", "avx2", "avx2_vnni", "avx512", "avx512_vnni", "avx512_bf16", "amx"])
def test_a_kernel_level_name_caps_as_its_cpus_are(level):
    """The kernel levels' own names cap too, keeping the extensions the level names (and the CPU has)."""
    got, real = probe(level), probe(None)
    runs = level in real["levels"]
    assert got["level"] == (level if runs else got["levels"][0])
    assert set(got["levels"]) <= set(real["levels"])
    cpu = got["cpu"]
    assert cpu["avx_vnni"] == (level == "avx2_vnni" and real["cpu"]["avx_vnni"] and runs)
    assert cpu["avx512_bf16"] == (level in ("avx512_bf16", "amx") and real["cpu"]["avx512_bf16"])
    assert cpu["avx512_fp16"] is False
    for amx in ("amx_tile", "amx_bf16", "amx_int8"):  # the amx level keeps the tiles, where the CPU has them
        assert cpu[amx] == (level == "amx" and real["cpu"][amx]), amx


def test_the_level_is_the_cpus_best_and_every_level_it_runs_can_be_set(set_kernel_level):
    if CPU["level_cap"]:
        pytest.skip("this process itself runs under CTRANSFORMER_KERNEL_LEVEL (make test-levels)")
    levels = ct.kernel_levels()
    assert ct.kernel_level() == levels[0] and levels[-1] == "portable"
    for level in levels:
        set_kernel_level(level)
        assert ct.kernel_level() == level
    for alias, level in [("x86-64", "portable"), ("x86-64-v2", "portable"), ("x86-64-v3", "avx2"),
                         ("x86-64-v4", "avx512")]:
        if level in levels:
            set_kernel_level(alias)
            assert ct.kernel_level() == level
    set_kernel_level("auto")
    assert ct.kernel_level() == levels[0]


def test_set_kernel_level_ends_a_one_product_choice():
    q = ct.quantization
    try:
        q.set_int8_kernel("portable")
        assert q.int8_kernel() == "portable"
        ct.set_kernel_level("auto")
        assert q.int8_kernel() == q.int8_kernels_available()[0]
    finally:
        q.set_int8_kernel("auto")


def test_bad_levels_are_value_errors_naming_what_is_expected():
    with pytest.raises(ValueError, match="set_kernel_level: kernel level must be one of portable, avx2, .*got 'sse9'"):
        ct.set_kernel_level("sse9")
    with pytest.raises(TypeError):
        ct.set_kernel_level(3)
    # A level above the CPU's (here, above a cap of avx2, whatever this process runs under): refused, naming
    # what it runs.
    code = ("import ctransformer as ct\ntry:\n    ct.set_kernel_level('avx512')\nexcept ValueError as e:\n"
            "    print(e)\nprint(', '.join(ct.kernel_levels()))\nprint(ct.kernel_level())")
    env = dict(os.environ, CTRANSFORMER_KERNEL_LEVEL="avx2")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    message, levels, level = run.stdout.splitlines()[-3:]
    assert levels in ("avx2, portable", "portable") and level == levels.split(", ")[0]
    assert message == f"set_kernel_level: this CPU cannot run level 'avx512'; it runs {levels} (or 'auto')"


def test_without_a_cap_the_cpu_is_reported_as_it_is():
    if CPU["level_cap"]:
        pytest.skip("this process itself runs under CTRANSFORMER_KERNEL_LEVEL (make test-levels)")
    got = probe(None)
    assert got["cpu"] == CPU and CPU["level_cap"] == ""
    assert got["int8"] == ct.quantization.int8_kernels_available()


def test_an_unknown_level_is_refused_at_import_naming_the_variable():
    env = dict(os.environ, CTRANSFORMER_KERNEL_LEVEL="avx3")
    run = subprocess.run([sys.executable, "-c", "import ctransformer"], env=env, capture_output=True, text=True)
    assert run.returncode != 0
    assert ("CTRANSFORMER_KERNEL_LEVEL must be portable, avx2, avx2_vnni, avx512, avx512_vnni, avx512_bf16, amx, "
            "dotprod, i8mm_bf16, x86-64, x86-64-v2, x86-64-v3 or x86-64-v4, got 'avx3'") in run.stderr


MACHINE = os.uname().machine
# Two levels of the other architecture, for each architecture we build on.
FOREIGN = {"x86_64": ["dotprod", "i8mm_bf16"], "aarch64": ["avx2", "x86-64-v3"]}
FEATURES = ["avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
            "amx_int8", "dotprod", "i8mm", "bf16", "sve"]


@pytest.mark.skipif(MACHINE not in FOREIGN, reason=f"no levels of another architecture listed for {MACHINE}")
@pytest.mark.parametrize("index", [0, 1])
def test_a_level_of_the_other_architecture_caps_at_the_baseline(index):
    """An ARM level on an x86 CPU (or an x86 one on ARM) leaves the CPU its architecture's baseline: no
    extension of either, the portable kernels only. One environment variable then means the same everywhere: at
    most that level's instructions."""
    level = FOREIGN[MACHINE][index]
    got = probe(level)
    assert got["level"] == "portable" and got["levels"] == ["portable"]
    # aarch64's baseline has NEON, and its int8 kernel (the plain C++ one is there too, on request)
    assert got["int8"] == (["neon", "portable"] if MACHINE == "aarch64" else ["portable"])
    assert got["bf16"] == "emulated"
    assert [name for name in FEATURES if got["cpu"][name]] == []
    assert got["cpu"]["simd_level"] == ("neon" if MACHINE == "aarch64" else "sse2")


@pytest.mark.skipif(MACHINE not in FOREIGN, reason=f"no levels of another architecture listed for {MACHINE}")
def test_a_level_of_the_other_architecture_cannot_be_set():
    level = FOREIGN[MACHINE][0]
    with pytest.raises(ValueError, match=f"this CPU cannot run level '{level}'; it runs .*portable"):
        ct.set_kernel_level(level)
    assert level not in ct.kernel_levels()


ARM_RANK = {"portable": 0, "dotprod": 1, "i8mm_bf16": 2}


@pytest.mark.skipif(MACHINE != "aarch64", reason="the aarch64 levels")
@pytest.mark.parametrize("level", list(ARM_RANK))
def test_an_arm_level_caps_as_its_cpus_are(level):
    """On aarch64 (make test-aarch64: qemu's neoverse-n1 has dotprod, its max,sve256 also i8mm and bf16): a
    level keeps the extensions it names that the CPU has, and every run-time choice follows."""
    got, real = probe(level), probe(None)
    cpu, have = got["cpu"], real["cpu"]
    rank = ARM_RANK[level]
    assert cpu["dotprod"] == (rank >= 1 and have["dotprod"])
    assert cpu["i8mm"] == (rank >= 2 and have["i8mm"]) and cpu["bf16"] == (rank >= 2 and have["bf16"])
    assert cpu["sve"] is False and cpu["simd_level"] == "neon"
    assert got["level"] == (level if level in real["levels"] else got["levels"][0])
    assert got["int8_now"] == {"portable": "neon", "dotprod": "dotprod", "i8mm_bf16": "i8mm"}[got["level"]]
    assert got["bf16"] == ("neon_bf16" if got["level"] == "i8mm_bf16" else "emulated")


# What each level's SIMD loops are compiled for (kernels/simd/, once per level in the one binary): xsimd's
# architecture, the vector width in floats, and whether multiply-adds are fused.
LOOPS = {"portable": ("sse2", 4, False), "avx2": ("fma3+avx2", 8, True), "avx2_vnni": ("fma3+avx2", 8, True),
         "avx512": ("avx512bw", 16, True), "avx512_vnni": ("avx512bw", 16, True), "avx512_bf16": ("avx512bw", 16, True),
         "amx": ("avx512bw", 16, True)}


@pytest.mark.skipif(MACHINE != "aarch64", reason="the aarch64 levels")
def test_every_arm_level_runs_the_neon_loops(set_kernel_level):
    """aarch64 has one copy of the SIMD loops, NEON (every aarch64 CPU has it), with fused multiply-adds: the ARM
    levels differ in their int8 and bf16 kernels only."""
    for level in ct.kernel_levels():
        set_kernel_level(level)
        loops = ct.build_info()["loops"]
        assert (loops["level"], loops["simd"], loops["float_lanes"], loops["fused_multiply_add"]) == \
            (level, "arm64+neon", 4, True)


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the x86-64 levels")
def test_each_level_runs_its_own_loops_in_one_binary(set_kernel_level):
    """Setting a level switches the SIMD loops to that level's copy at once: AVX-512 loops never run at
    avx2, and only SSE2 ones at portable (the qemu test proves it on emulated CPUs, this one here)."""
    for level in ct.kernel_levels():
        set_kernel_level(level)
        loops = ct.build_info()["loops"]
        assert loops["level"] == level
        assert (loops["simd"], loops["float_lanes"], loops["fused_multiply_add"]) == LOOPS[level], level
