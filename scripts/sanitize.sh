#!/usr/bin/env bash
# make sanitize: the core and the extension rebuilt under AddressSanitizer + UndefinedBehaviorSanitizer
# (build/asan) and ThreadSanitizer (build/tsan), each running a part of the test suite. Any report
# fails the run. Usage: scripts/sanitize.sh [address|thread|all]   (default all)
#
# The builds are copies of the package made by scripts/build_at_level.py --sanitize, put first on
# PYTHONPATH. The Python interpreter itself is not instrumented, so the sanitizer's runtime has to be
# loaded before anything else: LD_PRELOAD=$(g++ -print-file-name=libasan.so). The runtime writes each
# report to $out/logs/<tool>.<pid> (log_path) rather than stderr, so reports from the tests'
# subprocesses are caught too, and a test that checks a subprocess's stderr is not confused; the run
# fails if any log file appears, and prints them.
set -euo pipefail
cd "$(dirname "$0")/.."

which="${1:-all}"
py=.venv/bin/python
[ -x "$py" ] || { echo "sanitize: no .venv; run scripts/setup.sh test first (make sanitize does)"; exit 2; }
export PYTHONDONTWRITEBYTECODE=1  # the instrumented package copy shares no __pycache__ with the real one
failed=0

# Runs pytest on the given files with the sanitizer's runtime preloaded; fails on a report.
run_under() {
  local tool=$1 out=$2 runtime=$3; shift 3
  rm -rf "$out/logs" && mkdir -p "$out/logs"
  local start=$(date +%s) status=0
  env LD_PRELOAD="$runtime" PYTHONPATH="$out/pkg:$PWD/tests" \
      ASAN_OPTIONS="${ASAN_OPTIONS:-}:log_path=$PWD/$out/logs/asan" \
      UBSAN_OPTIONS="${UBSAN_OPTIONS:-}:log_path=$PWD/$out/logs/ubsan" \
      TSAN_OPTIONS="${TSAN_OPTIONS:-}:log_path=$PWD/$out/logs/tsan" \
      "$py" -m pytest -q -p no:cacheprovider "$@" || status=$?
  echo "== $tool: pytest exited $status after $(( $(date +%s) - start )) s"
  if compgen -G "$out/logs/*" >/dev/null; then
    echo "== $tool: sanitizer reports:"
    cat "$out"/logs/*
    status=1
  fi
  [ $status -eq 0 ] || failed=1
}

if [[ $which == all || $which == address ]]; then
  start=$(date +%s)
  "$py" scripts/build_at_level.py --arch default --out build/asan --sanitize address >/dev/null
  echo "== address: built in $(( $(date +%s) - start )) s"
  # detect_leaks=0: CPython (and torch, which the reference tests import) never frees much of what it
  # allocates at exit, by design, so LeakSanitizer would report thousands of leaks that are not ours;
  # tests/robustness/test_memory.py checks our own memory stays flat instead.
  # allocator_may_return_null=1: a failed malloc returns null as it does without ASan, so the
  # allocator's MemoryError path is tested as it is; ASan would otherwise abort on a huge request.
  export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:abort_on_error=0:detect_stack_use_after_return=0"
  # halt_on_error: the first undefined behaviour ends the run (the build also has -fno-sanitize-recover).
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
  # libstdc++ preloaded too: else it loads after the ASan runtime, whose __cxa_throw interceptor then
  # finds no real __cxa_throw and aborts at the first C++ exception ("CHECK failed ... real___cxa_throw").
  run_under address build/asan "$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libstdc++.so)" \
    tests/autograd tests/ops tests/loss tests/optim tests/decode \
    tests/nn/test_nn_layers.py tests/nn/test_transformer_post_norm.py tests/nn/test_gpt.py \
    tests/checkpoint/test_checkpoint.py tests/checkpoint/test_checkpoint_faults.py \
    tests/robustness/test_bad_input.py tests/robustness/test_hostile_calls.py \
    tests/training/test_batch.py tests/runtime/test_thread_pool.py \
    tests/serve/test_engine.py tests/serve/test_engine_gpt.py tests/serve/test_engine_threads.py
fi

if [[ $which == all || $which == thread ]]; then
  start=$(date +%s)
  "$py" scripts/build_at_level.py --arch default --out build/tsan --sanitize thread >/dev/null
  echo "== thread: built in $(( $(date +%s) - start )) s"
  # halt_on_error=0: collect every race of the run into the logs (the run fails on any of them).
  export TSAN_OPTIONS="halt_on_error=0:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp"
  # --noconftest: tests/conftest.py imports torch, whose OpenMP threads TSan cannot see through;
  # these files need neither torch nor the conftest (the last: the serving engine's thread beside Python's); the
  # runtime fixtures (tests/runtime_fixtures.py: thread counts put back) come as a plugin.
  run_under thread build/tsan "$(g++ -print-file-name=libtsan.so)" --noconftest -p runtime_fixtures \
    tests/runtime/test_thread_pool.py tests/training/test_threads_training.py tests/serve/test_engine_threads.py \
    tests/decode/test_lanes_threads.py
fi

exit $failed
