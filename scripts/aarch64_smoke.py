"""The smoke script of tests/runtime/test_qemu.py (train three steps, decode greedily, float32/bf16/int8) run by the
aarch64 build under two emulated ARM CPUs at once, checking that both give the same bits.

Usage (scripts/test_aarch64.sh runs it): python scripts/aarch64_smoke.py WRAPPER CPU_A CPU_B
WRAPPER is the aarch64 environment's python (build/aarch64/python), CPU_x a QEMU_CPU value. The script also runs
on this machine's own package (the Python running this file, x86-64), and the ARM float32 numbers must lie
within float32's reach of it (X86_BOUND below).

Both runs force one OpenBLAS core (NEOVERSEN1: plain NEON, which both CPUs have): left to itself OpenBLAS would
choose by CPU (an SVE core on the second), and a different GEMM summation order is a different float32 result,
which says nothing about our code. Our own kernels choose by CPU as they would on real hardware.
Must be the same bits: the float32 logits, the greedy ids and the int8 outputs (integer products, one rounding
order). Printed, not required: the training log, the parameters and the bf16 logits (on the second CPU the
bf16 kernel is the BFDOT one, which adds with rounding to odd: other bits than the emulated kernel of the first).
"""
import ast
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
MUST_MATCH = ["logits", "greedy", "int8"]
REPORTED = ["log", "params", "bf16"]
# ARM against x86-64: the same model and data, another summation order in every product (OpenBLAS's NEON
# kernels, NEON loops) through three training steps and a forward pass. The logits are O(1) and differ by a few
# 1e-7 (measured 2.7e-7, 2026-11-29), so 1e-4 is hundreds of times the spread while a wrong kernel (errors of
# 1e-2 and up) cannot pass. The parameters are printed, not bounded: Adam turns a gradient that is float32
# noise on one machine and not the other into a step of up to the learning rate (measured 1.4e-5 apart), which
# says nothing of either build. int8 and bf16 outputs are not compared across machines: a float32 ulp on one
# side of a quantisation or bf16 rounding boundary moves an output by a whole step (the knife edge).
X86_COMPARED = ["logits"]
X86_REPORTED = ["params"]
X86_BOUND = 1e-4


def smoke_script():
    """SCRIPT of tests/runtime/test_qemu.py, read without importing the test (it imports the x86 package)."""
    tree = ast.parse((ROOT / "tests/runtime/test_qemu.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SCRIPT" for t in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit("aarch64_smoke: no SCRIPT in tests/runtime/test_qemu.py")


def start(wrapper, cpu, script):
    env = {**os.environ, "QEMU_CPU": cpu, "OPENBLAS_CORETYPE": "NEOVERSEN1", "CTRANSFORMER_PROGRESS": "0",
           # the two runs share this machine's two cores: one thread each
           "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    env.pop("CTRANSFORMER_KERNEL_LEVEL", None)
    return subprocess.Popen([wrapper, "-W", "ignore", "-c", script], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def x86_run(script):
    """The same script on this machine's own package (its float32 kernels and OpenBLAS core, chosen as usual)."""
    env = {**os.environ, "CTRANSFORMER_PROGRESS": "0", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    env.pop("CTRANSFORMER_KERNEL_LEVEL", None)
    run = subprocess.run([sys.executable, "-W", "ignore", "-c", script], env=env, capture_output=True, text=True,
                         timeout=600)
    if run.returncode != 0:
        raise SystemExit(f"aarch64 smoke: the x86-64 run exited {run.returncode}:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.splitlines()[-1])


def largest_gap(a, b):
    """max |a - b| over two lists of float.hex strings."""
    return max(abs(float.fromhex(x) - float.fromhex(y)) for x, y in zip(a, b, strict=True))


def first_difference(a, b):
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"lengths {len(a)} and {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return f"first at [{i}]: {x!r} against {y!r} ({sum(p != q for p, q in zip(a, b))} of {len(a)} differ)"
    return f"{a!r} against {b!r}"


def main():
    wrapper, cpu_a, cpu_b = sys.argv[1:4]
    script = smoke_script()
    began = time.time()
    runs = {cpu: start(wrapper, cpu, script) for cpu in (cpu_a, cpu_b)}
    results, failed = {}, False
    for cpu, proc in runs.items():
        out, err = proc.communicate(timeout=1200)
        if proc.returncode != 0:
            print(f"aarch64 smoke: QEMU_CPU={cpu} exited {proc.returncode}:\n{err[-3000:]}")
            failed = True
            continue
        results[cpu] = json.loads(out.splitlines()[-1])
    if failed:
        return 1
    a, b = results[cpu_a], results[cpu_b]
    for cpu, r in results.items():
        print(f"   QEMU_CPU={cpu}: simd {r['cpu']}, int8 kernel {r['int8_kernel']}, bf16 kernel {r['bf16_kernel']}, "
              f"OpenBLAS core {r['blas_core']}, greedy {r['greedy'][0]}")
    print(f"   both runs in {time.time() - began:.0f} s")
    for key in MUST_MATCH + REPORTED:
        same = a[key] == b[key]
        print(f"   {key:7s} {'same bits' if same else 'DIFFERENT: ' + first_difference(a[key], b[key])}"
              f"{'' if key in MUST_MATCH else ' (reported only)'}")
        if not same and key in MUST_MATCH:
            failed = True
    host = x86_run(script)
    for key in X86_COMPARED + X86_REPORTED:
        gap = max(largest_gap(host[key], r[key]) for r in results.values())
        bounded = key in X86_COMPARED
        print(f"   {key:7s} against x86-64: largest difference {gap:.3g}"
              f"{f' (bound {X86_BOUND:g})' if bounded else ' (reported only)'}")
        if bounded and not gap <= X86_BOUND:
            failed = True
    if not a["greedy"] or not a["log"]:
        print("aarch64 smoke: no greedy ids or no training log")
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
