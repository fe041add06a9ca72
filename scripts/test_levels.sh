#!/usr/bin/env bash
# make test-levels: what other CPUs run, proven on this one. For each x86-64 level the package is built
# for that level (CTRANSFORMER_NATIVE=OFF, -march=LEVEL: scripts/build_at_level.py, into build/level-LEVEL,
# incremental), and the kernel-dependent tests run on that build with the run-time kernels a CPU of that
# level picks, forced:
#   x86-64-v3  (AVX2 + FMA, an AMD Zen 1):   CTRANSFORMER_KERNEL_LEVEL=x86-64-v3 (int8 avx2, bf16 emulated,
#              packed and few-rows products AVX2), OPENBLAS_CORETYPE=Haswell
#   x86-64     (SSE2, no AVX):                CTRANSFORMER_KERNEL_LEVEL=x86-64 (int8 portable, bf16
#              emulated, no FMA kernels), OPENBLAS_CORETYPE=Prescott (the wheel runs it as Katmai)
# On an AVX-512 machine this runs the instructions such a CPU runs (but torch's and CTranslate2's own
# dispatch, which pick their kernels for this CPU). The baseline build is then run under qemu-x86_64 with
# a CPU model that has no AVX (tests/runtime/test_qemu.py): an instruction above the baseline dies there.
# Usage: scripts/test_levels.sh [LEVEL ...]   (default: x86-64-v3 x86-64)
set -euo pipefail
cd "$(dirname "$0")/.."

py=.venv/bin/python
[ -x "$py" ] || { echo "test-levels: no .venv; run scripts/setup.sh test first (make test-levels does)"; exit 2; }
[ "$(uname -m)" = x86_64 ] || { echo "test-levels: x86-64 levels are built on an x86-64 host; nothing to do"; exit 0; }
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
  out=build/level-$level
  start=$(date +%s)
  "$py" scripts/build_at_level.py --arch "$level" --out "$out" >/dev/null
  echo "== $level: built in $(( $(date +%s) - start )) s"
  start=$(date +%s)
  status=0
  # CTRANSFORMER_EXPECT_MARCH: tests/conftest.py stops the run if the package imported is not this build.
  env PYTHONPATH="$PWD/$out/pkg" PYTHONDONTWRITEBYTECODE=1 CTRANSFORMER_EXPECT_MARCH="$level" \
      CTRANSFORMER_KERNEL_LEVEL="$level" OPENBLAS_CORETYPE="$core" \
      "$py" -m pytest -q -p no:cacheprovider -W "ignore::ctransformer.BLASCoreWarning" \
      --deselect tests/runtime/test_blas.py::test_parity_tests_pass_under_every_kernel_core_this_cpu_runs \
      "${tests[@]}" || status=$?
  echo "== $level: pytest exited $status after $(( $(date +%s) - start )) s"
  [ $status -eq 0 ] || failed=1
done

# The baseline build under an emulated CPU without AVX (and the v3 build on an emulated Haswell, if built).
if [[ " ${levels[*]} " == *" x86-64 "* ]]; then
  start=$(date +%s)
  status=0
  env PYTHONPATH="$PWD/build/level-x86-64/pkg" PYTHONDONTWRITEBYTECODE=1 CTRANSFORMER_EXPECT_MARCH=x86-64 \
      CTRANSFORMER_QEMU_V3_PKG="$PWD/build/level-x86-64-v3/pkg" \
      "$py" -m pytest -q -p no:cacheprovider -rs tests/runtime/test_qemu.py || status=$?
  echo "== qemu: pytest exited $status after $(( $(date +%s) - start )) s"
  [ $status -eq 0 ] || failed=1
fi
exit $failed
