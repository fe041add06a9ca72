#!/usr/bin/env bash
# make test-stress: the tests marked `threads` (threads, the serving engine, the server; tests/runtime_fixtures.py)
# under the conditions another machine brings, each run green or the whole fails:
#   - 3 runs on one core (taskset -c 0) beside a busy process on that same core: every thread of the tests, the
#     engine's and the pool's, waits its turn behind it, as on a loaded one-core machine;
#   - 1 run with 4 maths threads on the 2 cores (OPENBLAS_NUM_THREADS=4: the pool starts from OpenBLAS's count),
#     more threads than cores, as on a machine whose cores are taken.
# A test that asserts what a clock or a race decided fails here sooner or later; one that waits on a condition
# passes, only slower. (The whole suite's shuffled order is make test's own: pytest-randomly, a fixed seed.)
# Usage: scripts/test_stress.sh [pytest arguments]   e.g. -k engine
set -euo pipefail
cd "$(dirname "$0")/.."

py=.venv/bin/python
[ -x "$py" ] || { echo "test-stress: no .venv; run scripts/setup.sh test first (make test-stress does)"; exit 2; }
command -v taskset >/dev/null || { echo "test-stress: taskset is missing (Debian's util-linux)"; exit 2; }

hog=""
stop_hog() { [ -z "$hog" ] || { kill "$hog" 2>/dev/null || true; wait "$hog" 2>/dev/null || true; hog=""; }; }
trap stop_hog EXIT

run() {   # a label, then the command; its pytest's last line, and its exit status kept
  local label=$1 start status=0; shift
  start=$(date +%s)
  echo "== test-stress: $label"
  "$@" || status=$?
  echo "== test-stress: $label: pytest exited $status after $(( $(date +%s) - start )) s"
  return $status
}

pytest=("$py" -m pytest -q -p no:cacheprovider -p no:randomly -m threads tests "$@")
start=$(date +%s)
for round in 1 2 3; do
  taskset -c 0 "$py" -c "while True: pass" &
  hog=$!
  run "one busy core, round $round of 3" taskset -c 0 "${pytest[@]}"
  stop_hog
done
run "4 maths threads on $(nproc) cores" env OPENBLAS_NUM_THREADS=4 "${pytest[@]}"
echo "== test-stress: green in $(( $(date +%s) - start )) s"
