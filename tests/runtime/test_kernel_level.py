"""CTRANSFORMER_KERNEL_LEVEL: one process runs the kernels a CPU of a smaller x86-64 level would pick.

Each case runs in a fresh process (the features are read once per process). The cap is what `make
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
                  "bf16": amp.bf16_kernel()}))
"""


def probe(level):
    env = dict(os.environ)
    env.pop("CTRANSFORMER_KERNEL_LEVEL", None)
    if level is not None:
        env["CTRANSFORMER_KERNEL_LEVEL"] = level
    run = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.splitlines()[-1])


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 levels")
@pytest.mark.parametrize("level,simd,int8", [("x86-64", "sse2", {"portable"}),
                                             ("x86-64-v2", "sse4.2", {"portable"}),
                                             ("x86-64-v3", "avx2", {"avx2", "portable"}),
                                             ("x86-64-v4", "avx512", {"avx2", "portable"})])
def test_a_level_caps_every_run_time_choice(level, simd, int8):
    got = probe(level)
    cpu = got["cpu"]
    assert cpu["level_cap"] == level
    # Never more than the CPU has, never more than the level allows.
    assert RANK[cpu["simd_level"]] == min(RANK[simd], RANK[CPU["simd_level"]])
    for extension in ["avx512_vnni", "avx_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8"]:
        assert cpu[extension] is False, extension
    assert cpu["avx512f"] == (level == "x86-64-v4" and CPU["avx512f"])
    assert cpu["avx2"] == (RANK[simd] >= 2 and CPU["avx2"])
    assert set(got["int8"]) <= int8 and "portable" in got["int8"]
    assert got["int8_now"] == got["int8"][0]          # auto: the best the capped CPU has
    assert got["bf16"] == "emulated"


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
    assert "CTRANSFORMER_KERNEL_LEVEL must be x86-64, x86-64-v2, x86-64-v3 or x86-64-v4, got 'avx3'" in run.stderr
