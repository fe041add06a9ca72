#!/usr/bin/env bash
# make test-levels: the kernel-dependent tests in a whole process as a smaller CPU runs them, on this one.
# The package is one binary for every x86-64 CPU (its kernels chosen at run time), and `make test` already
# runs each kernel level this CPU has in one process. What only a process of its own shows is the rest of
# such a CPU's run: OpenBLAS's core, chosen once when the library loads, and every choice made at import.
# So the same tests run again, once per CPU class, with the level capped and OpenBLAS's core forced:
#   x86-64-v3  (AVX2 + FMA, an AMD Zen 1):  CTRANSFORMER_KERNEL_LEVEL=x86-64-v3, OPENBLAS_CORETYPE=Haswell
#   x86-64     (SSE2, no AVX):               CTRANSFORMER_KERNEL_LEVEL=x86-64, OPENBLAS_CORETYPE=Prescott
# That no instruction above a level runs on such a CPU is proven under qemu by tests/runtime/test_qemu.py
# (part of make test). Usage: scripts/test_levels.sh [LEVEL ...]   (default: x86-64-v3 x86-64)
set -euo pipefail
cd "$(dirname "$0")/.."

py=.venv/bin/python
[ -x "$py" ] || { echo "test-levels: no .venv; run scripts/setup.sh test first (make test-levels does)"; exit 2; }
[ "$(uname -m)" = x86_64 ] || { echo "test-levels: the x86-64 levels; nothing to do on $(uname -m)"; exit 0; }
levels=("$@")
[ ${#levels[@]} -gt 0 ] || levels=(x86-64-v3 x86-64)

# What such a CPU's kernels touch: the ops, losses, optimizers, autograd, every model (float32, int8, bf16),
# decoding, int8 checkpoints, the BLAS paths (packed and few-rows products) and the level cap itself.
# Left out: what no kernel decides (bad input, checkpoints' files, packaging, docs, the CLI, data) and the
# per-core re-run of the parity tests (this run is one of its cores).
tests=(tests/ops tests/loss tests/optim tests/autograd tests/nn tests/decode tests/checkpoint/test_checkpoint_int8.py
       tests/training/test_train_bf16.py tests/runtime/test_blas.py tests/runtime/test_kernel_level.py)

failed=0
for level in "${levels[@]}"; do
  case $level in
    x86-64-v3) core=Haswell ;;
    x86-64) core=Prescott ;;
    *) echo "test-levels: no OpenBLAS core is set for $level (x86-64-v3 or x86-64)"; exit 2 ;;
  esac
  start=$(date +%s)
  status=0
  env PYTHONDONTWRITEBYTECODE=1 CTRANSFORMER_KERNEL_LEVEL="$level" OPENBLAS_CORETYPE="$core" \
      "$py" -m pytest -q -p no:cacheprovider -W "ignore::ctransformer.BLASCoreWarning" \
      --deselect tests/runtime/test_blas.py::test_parity_tests_pass_under_every_kernel_core_this_cpu_runs \
      "${tests[@]}" || status=$?
  echo "== $level (OpenBLAS $core): pytest exited $status after $(( $(date +%s) - start )) s"
  [ $status -eq 0 ] || failed=1
done
exit $failed
