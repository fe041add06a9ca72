"""`pip wheel .` gives one wheel for every x86-64 CPU: it installs into a fresh virtual environment (its
dependencies from PyPI, nothing from this tree) and runs there.

The build is the default one (the x86-64 baseline, the kernels chosen at run time), so the wheel made on
this machine is the wheel any other x86-64 machine may take; tests/runtime/test_qemu.py runs the same code
on emulated CPUs without AVX and without AVX-512.
"""
import json
import math
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

SMOKE = r"""
import json, numpy as np, ctransformer as ct
x = ct.tensor(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, requires_grad=True)
w = ct.tensor(np.ones((2, 4), np.float32), requires_grad=True)
y = ct.functional.linear(ct.functional.gelu(x), w).sum()
y.backward()
model = ct.nn.Transformer(n_src_vocab=11, n_trg_vocab=11, src_pad_idx=0, trg_pad_idx=0, d_word_vec=16, d_model=16,
                          d_inner=32, n_layers=1, n_head=2, d_k=8, d_v=8)
src = np.array([[1, 2, 3, 4]])
with ct.no_grad():
    logits = model(src, src).numpy()
print(json.dumps({"file": ct.__file__, "march": ct.build_info()["march"], "level": ct.kernel_level(),
                  "levels": ct.kernel_levels(), "y": float(y.numpy()), "gx": x.grad.numpy().tolist(),
                  "logits_finite": bool(np.isfinite(logits).all()), "logits_shape": list(logits.shape)}))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    # No build isolation: the build tools are this environment's (setup.sh installs them), and CMake's cache
    # under build/ holds, so only what changed is compiled.
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out)], check=True, capture_output=True, text=True, timeout=1800)
    wheels = list(out.glob("ctransformer-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_the_wheel_installs_in_a_fresh_venv_and_runs(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CTRANSFORMER_KERNEL_LEVEL")}
    install = subprocess.run([str(py), "-m", "pip", "install", "-q", str(wheel)], capture_output=True, text=True,
                             env=env, timeout=1200)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    run = subprocess.run([str(py), "-c", SMOKE], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["file"].startswith(str(venv)), got["file"]  # the wheel's copy, not this tree's
    assert got["march"] == "x86-64" and got["level"] == got["levels"][0]
    # y = 2 sum_j gelu(x_j) (two outputs of weights 1; GELU's tanh form), dy/dx = 2 gelu'(x): gelu'(0) = 0.5,
    # growing with x on [0, 1.1]. (float32 against float64: rel 1e-5 for a sum of 12 terms.)
    xs = [i / 10 for i in range(12)]
    gelu = [0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))) for v in xs]
    assert got["y"] == pytest.approx(2 * sum(gelu), rel=1e-5)
    gx = [v for row in got["gx"] for v in row]
    assert gx[0] == pytest.approx(1.0, abs=1e-6) and all(b > a for a, b in zip(gx, gx[1:]))
    assert got["logits_shape"] == [4, 11] and got["logits_finite"]  # (batch x length, vocabulary): post-norm flattens
