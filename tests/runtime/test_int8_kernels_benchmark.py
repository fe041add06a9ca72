"""benchmarks/int8_kernels.py, the int8 kernels' timing for a new CPU, runs, names every kernel this CPU has and
refuses an unknown shape by name (its numbers are timings: nothing is asserted of them)."""
import pathlib
import subprocess
import sys

from ctransformer import quantization as Q

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "int8_kernels.py"


def test_every_kernel_is_timed_against_the_portable_one():
    run = subprocess.run([sys.executable, str(SCRIPT), "--shapes", "small ffn out", "--rows", "1,3", "--rounds", "1",
                          "--gap", "0"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    kernels = Q.int8_kernels_available()
    assert kernels[-1] == "portable"
    header = next(line for line in lines if line.startswith("| shape"))
    assert all(f"{k} GMAC/s" in header for k in kernels)
    assert all(f"{k}/portable" in header for k in kernels[:-1])
    rows = [line for line in lines if line.startswith("| small ffn out |")]
    assert [row.split("|")[2].strip() for row in rows] == ["1", "3"]
    assert all(len(row.split("|")) == len(header.split("|")) for row in rows)


def test_an_unknown_shape_is_refused_by_name():
    run = subprocess.run([sys.executable, str(SCRIPT), "--shapes", "huge"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2 and "--shapes: unknown shape 'huge'" in run.stderr
