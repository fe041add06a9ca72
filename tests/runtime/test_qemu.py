"""No instruction above a CPU's level runs on it: the build runs on emulated CPUs without AVX, and without AVX-512.

The package is built for the x86-64 baseline (the default, CTRANSFORMER_NATIVE=OFF) and picks its kernels
at run time. A script imports it, trains the copy task's model a few steps
(float32, then a step under bf16 autocast), and decodes greedily in float32 and int8, once natively and once
under Debian's qemu-x86_64 with `-cpu Nehalem` (SSE4.2, no AVX, no FMA). Any instruction that a Nehalem
lacks (an AVX encoding compiled in by mistake, an intrinsic outside its guard, a kernel chosen by a wrong
run-time check) raises SIGILL there. Both runs take the same kernels (the portable SIMD loops, int8
'portable', bf16 'emulated', OpenBLAS's Prescott core: the native run is capped by
CTRANSFORMER_KERNEL_LEVEL=x86-64, the emulated CPU has nothing more), so the numbers must be the same bits.
The same script then runs under `-cpu Haswell` (AVX2 and FMA, no AVX-512), where the AVX2 kernels must run
and nothing of AVX-512's.

What qemu cannot prove: the timing; instructions whose results real CPUs leave to the implementation
(qemu computes the approximate reciprocals rcpps/rsqrtps exactly, a real CPU to 12 bits: the core uses
neither, which the bitwise comparison here would catch); that the CPU features qemu reports are a real
Nehalem's (a model flag qemu got wrong would go unseen); and code that only a larger CPU reaches.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

import ctransformer as ct

QEMU = shutil.which("qemu-x86_64")

SCRIPT = r"""
import json, sys, numpy as np, ctransformer as ct
from ctransformer.train import train

cfg = {"steps": 3, "warmup": 2, "log_every": 1, "d_model": 32, "d_inner": 64, "n_layers": 1, "batch_size": 8,
       "eval_batches": 1, "dropout": 0.0}
history = []
task, model, result = train("copy", cfg, progress=False, log=lambda *a: history.append(" ".join(map(str, a))))
model.eval()
src = np.array([[1, 2, 3, 4, 5, 6, 7, 8, 9, 2], [1, 9, 8, 7, 6, 5, 4, 3, 2, 9]])
mask = ct.nn.get_pad_mask(src, 0)
with ct.no_grad():
    logits = model(src, src).numpy()
    greedy = np.asarray(ct.decode.greedy_decode(model, src, mask, 10, 1, 10)).tolist()
    with ct.autocast():
        bf16 = model(src, src).numpy()
params = np.concatenate([v.ravel() for v in model.state_dict().values()])
model.quantize("int8")
with ct.no_grad():
    int8 = model(src, src).numpy()
hexes = lambda a: [float(x).hex() for x in np.asarray(a, np.float64).ravel()[::7]]
print(json.dumps({"cpu": ct.build_info()["cpu"]["simd_level"], "int8_kernel": ct.quantization.int8_kernel(),
                  "bf16_kernel": ct.amp.bf16_kernel(), "blas_core": ct.build_info()["blas"]["core"],
                  "log": history, "params": hexes(params), "logits": hexes(logits), "greedy": greedy,
                  "bf16": hexes(bf16), "int8": hexes(int8)}))
"""

pytestmark = [
    pytest.mark.skipif(ct.build_info()["march"] != "x86-64",
                       reason="a build for this CPU only (CTRANSFORMER_NATIVE=ON or CTRANSFORMER_ARCH) cannot run on "
                              "an older one"),
    pytest.mark.skipif(QEMU is None, reason="qemu-x86_64 is needed (apt-get install qemu-user; setup.sh test installs it)"),
]


def run(prefix, extra_env):
    env = {k: v for k, v in os.environ.items() if k != "CTRANSFORMER_KERNEL_LEVEL"}
    env.update({"OPENBLAS_CORETYPE": "Prescott", "CTRANSFORMER_PROGRESS": "0", **extra_env})
    done = subprocess.run([*prefix, sys.executable, "-W", "ignore", "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, f"{' '.join(prefix) or 'native'} exited {done.returncode}:\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.splitlines()[-1])


def test_the_baseline_build_trains_and_decodes_on_a_cpu_without_avx_with_the_same_bits():
    assert ct.build_info()["march"] == "x86-64"
    native = run([], {"CTRANSFORMER_KERNEL_LEVEL": "x86-64"})
    emulated = run([QEMU, "-cpu", "Nehalem"], {})
    # The emulated CPU really is below AVX, and both runs took the same kernels.
    assert emulated["cpu"] == "sse4.2" and native["cpu"] == "sse2"
    for key in ["int8_kernel", "bf16_kernel", "blas_core"]:
        assert emulated[key] == native[key], key
    assert native["int8_kernel"] == "portable" and native["bf16_kernel"] == "emulated"
    assert native["greedy"] and native["log"]
    for key in ["log", "params", "logits", "greedy", "bf16", "int8"]:
        assert emulated[key] == native[key], key


def test_the_avx2_kernels_run_on_an_emulated_haswell():
    """On a CPU with AVX2 and FMA but no AVX-512 (qemu's Haswell model) the build picks the AVX2 kernels and
    runs the same script to the end, with the numbers of the same kernels here (capped at x86-64-v3, OpenBLAS's
    Haswell core on both sides): no AVX-512 instruction runs where the level says AVX2."""
    env = {"OPENBLAS_CORETYPE": "Haswell"}
    emulated = run([QEMU, "-cpu", "Haswell"], env)
    assert emulated["cpu"] == "avx2" and emulated["int8_kernel"] == "avx2"
    native = run([], {**env, "CTRANSFORMER_KERNEL_LEVEL": "x86-64-v3"})
    for key in ["int8_kernel", "bf16_kernel", "blas_core"]:
        assert emulated[key] == native[key], key
    assert emulated["greedy"] == native["greedy"]
