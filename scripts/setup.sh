#!/usr/bin/env bash
# Everything a fresh machine needs before ctransformer runs: Debian's C++ libraries, a virtual
# environment in .venv, and `pip install .` with the extras named as arguments (e.g. test).
# Safe to run again: each step is skipped when already done, and the build is incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

extras="${1:-}"

# xtensor: header-only C++ arrays. OpenBLAS is not among them: pip installs the scipy-openblas32 wheel
# (pyproject.toml), the OpenBLAS that numpy and SciPy ship. Open MPI: data-parallel training
# (mpirun ... --distributed); the build finds it and links it in.
packages=(g++ libxtensor-dev openmpi-bin libopenmpi-dev)
# The tests also compile the SIMD kernels for aarch64, so an x86-only intrinsic cannot slip in.
[[ ",$extras," == *",test,"* ]] && packages+=(g++-aarch64-linux-gnu)
need=()
for pkg in "${packages[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing Debian packages: ${need[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  python3 -m venv .venv
fi

target="."
[ -n "$extras" ] && target=".[$extras]"
echo "== pip install $target (compiles the C++ core; incremental after the first time)"
start=$(date +%s)
.venv/bin/python -m pip install -q "$target"
echo "== installed in $(( $(date +%s) - start )) s"
