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
# The tests also compile the SIMD kernels for aarch64, so an x86-only intrinsic cannot slip in; and run the
# baseline build on an emulated CPU without AVX (qemu-user: make test-levels); and open the built guide in a
# headless browser (chromium: tests/docs/test_guide.py). make test-aarch64 also cross-builds the package and
# runs it under qemu-aarch64 in an arm64 Debian tree that mmdebstrap extracts (scripts/test_aarch64.sh).
# (On an ARM machine the tests run natively: no cross compiler, no emulator.)
if [[ ",$extras," == *",test,"* ]]; then
  # ccache: the test targets' builds go through it (scripts/compiler_launcher.sh).
  packages+=(chromium ccache)
  [ "$(uname -m)" = x86_64 ] && packages+=(g++-aarch64-linux-gnu qemu-user mmdebstrap)
fi
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

# The build runs in .venv itself (--no-build-isolation), with the build requirements of pyproject.toml
# installed there first: pip's default isolated build environment is a new folder each time, so CMake saw
# new paths and compiled everything again (5 minutes on a Zen 1 with nothing changed). Here CMake's cache in
# build/ stays valid and ninja rebuilds only what changed.
build_requires=$(.venv/bin/python - <<'PY'
import re
text = open("pyproject.toml").read()
block = re.search(r"\[build-system\](.*?)(^\[|\Z)", text, re.S | re.M).group(1)
print(" ".join(re.findall(r'"([^"]+)"', re.search(r"requires\s*=\s*\[(.*?)\]", block, re.S).group(1))))
PY
)
# cmake and ninja: scikit-build-core fetches them into an isolated build when the machine lacks them.
.venv/bin/python -m pip install -q $build_requires cmake ninja

target="."
[ -n "$extras" ] && target=".[$extras]"
echo "== pip install $target (compiles the C++ core; incremental after the first time)"
start=$(date +%s)
.venv/bin/python -m pip install -q --no-build-isolation "$target"
echo "== installed in $(( $(date +%s) - start )) s"
