#!/usr/bin/env bash
# make test-aarch64: the package cross-built for 64-bit ARM and tested under qemu-user, on this x86-64 machine.
# What it proves: the core compiles for aarch64 with no x86 intrinsic left unguarded, its portable and NEON
# paths give the right numbers on an ARM CPU (two of them: a Neoverse N1, and qemu's `max` with SVE-256, i8mm
# and bf16 but SME off), and the same float32/int8 bits on both. It needs no ARM machine, no binfmt_misc and no
# root beyond what mmdebstrap wants (root, or user namespaces for its unshare mode).
#
# Steps, each cached so a second run only rebuilds what changed:
#  1. tree:  an arm64 Debian bookworm tree (mmdebstrap --variant=extract: packages unpacked, nothing configured
#            or run) with python3.11, its headers and xtensor's headers, in $cache/tree-<key>.
#  2. site:  the aarch64 wheels (torch 2.10.0, numpy, scipy-openblas32, pytest, ...) installed with THIS machine's
#            pip (--platform/--abi/--target, --no-deps: pip would otherwise evaluate torch's CUDA markers for
#            x86-64), in $cache/site-<key>, a folder laid out like site-packages.
#  3. build: CMake with cmake/aarch64-linux-gnu.cmake into build/aarch64 (Release, Ninja, 2 jobs, no MPI); the
#            module and _build_config.py go to build/aarch64/pkg/ctransformer, beside symlinks to the sources'
#            .py files, so no aarch64 .so ever lands in python/ctransformer (the x86 build would load it).
#  4. smoke: tests/runtime/test_qemu.py's SCRIPT (train three steps, decode greedily, float32/bf16/int8) under
#            QEMU_CPU=neoverse-n1 and max,sme=off,sve256=on at once; float32 logits, greedy ids and int8 outputs must
#            be the same bits (scripts/aarch64_smoke.py; both runs force one OpenBLAS core, NEOVERSEN1), and the
#            logits within float32 reach of the same script run by the x86-64 package.
#  5. tests: pytest under neoverse-n1 on the subset below, in two shards side by side, and the int8 and bf16 ops
#            and autocast again under the SVE CPU (its i8mm and bf16 kernels against torch), and the int8 ops under
#            a Cortex-A72 (no SDOT: the NEON kernel).
# The cache key of a step is a hash of its pinned list: change a pin and a new folder is made (old ones can be
# deleted by hand: $cache). A folder counts only when its stamp file exists, written last.
#
# build/aarch64/python is that environment's `python`: a shell script running the tree's /usr/bin/python3.11
# under qemu-aarch64 (-L tree) with PYTHONPATH = pkg:site. qemu's -0 gives the guest the script's own path as
# argv[0], so sys.executable is the script, and a test's `subprocess.run([sys.executable, ...])` re-enters qemu
# (the guest's execve of a shell script is the host kernel's: it runs /bin/sh, which runs qemu again).
# QEMU_CPU picks the emulated CPU (default neoverse-n1). Always name one: qemu's plain `max` has SME, and
# OpenBLAS's SME kernels then raise floating-point exception flags that tests see.
#
# The test subset (shard_a, shard_b, sve_tests below), cut to keep a cold run (tree + wheels + build + tests) under
# ten minutes on 2 cores; under qemu the tests run some 10-30 times slower than natively, plus ~20 s per process
# to import torch:
#  - in: tests/ops, tests/autograd, tests/loss, tests/optim (every op, gradient, loss and optimizer against torch);
#    from tests/nn: test_quantize.py (int8 against float), test_nn_layers.py, test_autocast.py (bf16 against
#    torch's autocast), test_module_subclass.py; from tests/decode: test_decode.py, test_beam_search.py,
#    test_gpt_generate_cache.py, test_precision_names.py, test_search_batches.py and test_lanes_threads.py (the
#    batches' lanes: two guest threads); tests/runtime/test_kernel_level.py (the ARM levels).
#  - out, for time: the whole-model parity files of tests/nn (test_transformer_post_norm.py and
#    test_transformer_small_pre_norm.py take 18 s and 28 s natively, several minutes under qemu; test_gpt.py,
#    test_relu_knife_edges.py), built of the ops tested above.
#  - out, as they cannot run here: whatever takes its reference from Hugging Face transformers (not installed for
#    aarch64: tests/nn/test_marian.py, test_gpt2_sampling.py, tests/decode/test_marian_*.py,
#    test_translator_stream.py) or from the hub (the *_pretrained.py files).
#  - out, as they are about x86 or need more than this environment: the rest of tests/runtime (x86 CPU levels,
#    qemu-x86_64, OpenBLAS's x86 cores), tests/distributed (MPI is off in this build), packaging (pip-installed wheel and stubs),
#    docs, serve (httpx/starlette), training (minutes of steps), data, checkpoint, robustness (memory limits
#    under emulation), fuzz.
# Usage: scripts/test_aarch64.sh [PYTEST ARGS...]   (arguments replace the test subset, e.g. tests/ops -k layer_norm)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

host_py=$root/.venv/bin/python
[ -x "$host_py" ] || { echo "test-aarch64: no .venv; run scripts/setup.sh test first (make test-aarch64 does)"; exit 2; }
for tool in mmdebstrap qemu-aarch64 aarch64-linux-gnu-g++; do
  command -v "$tool" >/dev/null || { echo "test-aarch64: $tool is missing; scripts/setup.sh test installs it"; exit 2; }
done
# cmake and ninja come from .venv (setup.sh installs them there).
export PATH=$root/.venv/bin:$PATH

# --- pins ----------------------------------------------------------------------------------------------------
# The tree: Python 3.11 and its headers (the extension is built against them and run by it), the C++ runtime,
# and xtensor/xsimd/xtl/nlohmann-json headers with their CMake configs for arm64 (the host's are x86-64 ones).
tree_packages=(python3.11 libpython3.11-dev libstdc++6 libgcc-s1 libc6 libxtensor-dev libxsimd-dev xtl-dev
               nlohmann-json3-dev)
suite=bookworm
# The wheels, with every dependency named (pip runs with --no-deps). torch 2.10.0 is the only aarch64 torch on
# PyPI whose wheel pulls no CUDA package; never another version here. scipy-openblas32: pyproject.toml wants
# >= 0.3.34. The rest: what the test subset and the package import, each with its own requirements.
wheels=(
  torch==2.10.0 filelock==4.3.1 typing_extensions==4.16.0 sympy==1.14.0 mpmath==1.3.0 networkx==3.6.1
  jinja2==3.1.6 markupsafe==3.0.4 fsspec==2026.9.0
  numpy==2.4.6 scipy-openblas32==0.3.34.481.3 safetensors==0.8.0 tqdm==4.70.1 sentencepiece==0.2.3
  sacrebleu==2.6.0 portalocker==4.4.2 regex==2026.11.19 tabulate==0.10.0 colorama==0.4.6 lxml==6.1.3
  pytest==9.2.0 iniconfig==2.3.1 packaging==26.4 pluggy==1.7.0 pygments==2.21.0
  hypothesis==6.170.17 sortedcontainers==2.4.0
)
# Two shards of about the same length (measured under qemu, in pytest: ops 27 s, quantize 62, optim 40, autocast
# and module_subclass 21, GPT cache 13 | decode 36, beam search 32, autograd 11, the rest 6, then the SVE run
# 60), run side by side: qemu runs a guest thread on one host core, and most of the tests' time is
# single-threaded Python and small products.
shard_a=(tests/ops tests/nn/test_quantize.py tests/optim tests/nn/test_autocast.py tests/nn/test_module_subclass.py
         tests/decode/test_gpt_generate_cache.py)
shard_b=(tests/decode/test_decode.py tests/decode/test_beam_search.py tests/decode/test_precision_names.py
         tests/decode/test_search_batches.py tests/decode/test_lanes_threads.py
         tests/autograd tests/loss tests/nn/test_nn_layers.py)
# Then, on shard b's core, the int8 and bf16 ops and autocast again as the SVE CPU, whose kernel table adds the
# SMMLA int8 and BFDOT bf16 kernels (the N1 has the SDOT one only): each kernel against torch. And the kernel
# levels (tests/runtime/test_kernel_level.py, 50 s): that CPU runs all three ARM levels, each capped in turn.
sve_tests=(tests/ops/test_ops_int8.py tests/ops/test_ops_bf16.py tests/nn/test_autocast.py
           tests/runtime/test_kernel_level.py)
if [ $# -gt 0 ]; then shard_a=("$@"); shard_b=(); sve_tests=(); fi

cache=${XDG_CACHE_HOME:-$HOME/.cache}/ctransformer/aarch64
key() { printf '%s\n' "$@" | sha256sum | cut -c1-12; }
tree=$cache/tree-$(key "$suite" arm64 "${tree_packages[@]}")
site=$cache/site-$(key cp311 manylinux_2_28_aarch64 "${wheels[@]}")
build=$root/build/aarch64
wrapper=$build/python
stamp=.ctransformer-complete

timings=()
script_start=$(date +%s)
phase_start=0
begin() { phase_start=$(date +%s); echo "== aarch64: $1"; }
end() { timings+=("$(printf '%-8s %4d s' "$1" $(( $(date +%s) - phase_start )))"); }
report() {
  echo "== aarch64: times"
  printf '   %s\n' "${timings[@]}"
  printf '   %-8s %4d s\n' total $(( $(date +%s) - script_start ))
}
trap report EXIT

# --- 1. the arm64 Debian tree ----------------------------------------------------------------------------------
begin "Debian $suite arm64 tree ($tree)"
if [ ! -e "$tree/$stamp" ]; then
  rm -rf "$tree" "$tree.tmp"
  mkdir -p "$cache"
  # No binfmt_misc needed: the extract variant runs no maintainer script (so no update-alternatives either:
  # Debian's libopenblas.so links would be missing, which is fine, the BLAS is the scipy-openblas32 wheel's).
  mmdebstrap --quiet --variant=extract --architectures=arm64 --include="$(IFS=,; echo "${tree_packages[*]}")" \
      "$suite" "$tree.tmp"
  # Python puts /usr/lib/python3/dist-packages and /usr/local/lib/python3.11/dist-packages on sys.path; qemu's -L
  # maps a path into the tree only when it exists there, else it reads the HOST's folder (x86-64 modules).
  # Empty folders in the tree keep the host's out.
  mkdir -p "$tree.tmp/usr/lib/python3/dist-packages" "$tree.tmp/usr/local/lib/python3.11/dist-packages"
  touch "$tree.tmp/$stamp"
  mv "$tree.tmp" "$tree"
else
  echo "   cached"
fi
end tree

# --- 2. the aarch64 wheels ---------------------------------------------------------------------------------------
begin "aarch64 wheels ($site)"
if [ ! -e "$site/$stamp" ]; then
  rm -rf "$site" "$site.tmp"
  # Several --platform tags: this pip does not count an older manylinux as compatible with a newer one, and
  # safetensors' wheel is manylinux_2_17. abi3 and none: safetensors' and pure-Python wheels.
  "$host_py" -m pip install -q --no-deps --only-binary=:all: --target "$site.tmp" \
      --platform manylinux_2_28_aarch64 --platform manylinux_2_17_aarch64 --platform manylinux2014_aarch64 \
      --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none "${wheels[@]}" 2>&1 |
    { grep -v "is ignored: it is neither a file nor a directory" || true; }
  touch "$site.tmp/$stamp"
  mv "$site.tmp" "$site"
else
  echo "   cached"
fi
end wheels

# --- 3. the environment's python, and the cross-build ------------------------------------------------------------
begin "cross-build ($build)"
pkg=$build/pkg/ctransformer
mkdir -p "$pkg"
cat > "$wrapper.tmp" <<EOF
#!/bin/sh
# Written by scripts/test_aarch64.sh: python3.11 of the arm64 tree under qemu-user (QEMU_CPU, default neoverse-n1).
# -0 "\$0": the guest's argv[0], hence sys.executable, is this script, so child interpreters come back here.
# PYTHONHOME: the guest's /usr, which -L maps to the tree.
export QEMU_LD_PREFIX='$tree' PYTHONHOME=/usr PYTHONPATH='$build/pkg:$site:$PWD/tests'
exec qemu-aarch64 -cpu "\${QEMU_CPU:-neoverse-n1}" -0 "\$0" '$tree/usr/bin/python3.11' "\$@"
EOF
chmod +x "$wrapper.tmp"
mv "$wrapper.tmp" "$wrapper"

# The package: the sources' .py files (linked, so edits show at once) beside the aarch64 module and its
# _build_config.py. The x86 module (*.so) and _build_config.py of python/ctransformer are not linked.
for entry in python/ctransformer/*; do
  name=${entry##*/}
  case $name in *.so|_build_config.py|__pycache__) continue ;; esac
  ln -sfn "$root/$entry" "$pkg/$name"
done

# Configure once (and again when CMake decides to). Python_EXECUTABLE is the wrapper: CMake and pybind11 ask it
# for the module suffix and CMakeLists.txt for scipy_openblas32's aarch64 library. Its headers are named: the
# interpreter reports /usr/include/python3.11, a path of the guest that FindPython does not look up in the tree.
# pybind11 (>= 3, headers and CMake only) from the host's .venv, as Debian bookworm's is 2.10.
# A new tree or wheel folder (a pin changed) is a new configuration: the old cache names the old paths.
configured_for="$tree $site"
if [ ! -e "$build/build.ninja" ] || [ "$(cat "$build/configured-for" 2>/dev/null)" != "$configured_for" ]; then
  rm -rf "$build/CMakeCache.txt" "$build/CMakeFiles"
  cmake -S . -B "$build" -G Ninja --toolchain "$root/cmake/aarch64-linux-gnu.cmake" \
      -DCT_AARCH64_ROOT="$tree" -DCMAKE_BUILD_TYPE=Release -DCTRANSFORMER_MPI=OFF \
      -DCTRANSFORMER_BLAS=scipy-openblas32 -DCTRANSFORMER_PYTHON_OUTPUT_DIR="$pkg" \
      -DPython_EXECUTABLE="$wrapper" -DPython_INCLUDE_DIR="$tree/usr/include/python3.11" \
      -Dpybind11_DIR="$("$host_py" -m pybind11 --cmakedir)"
  echo "$configured_for" > "$build/configured-for"
fi
cmake --build "$build" --target _core -j 2
module=$(ls "$pkg"/_core.*.so)
case $module in
  */_core.cpython-311-aarch64-linux-gnu.so) ;;
  *) echo "test-aarch64: the module is $module, not _core.cpython-311-aarch64-linux-gnu.so"; exit 1 ;;
esac
end build

# --- 4. the smoke script on two CPUs -------------------------------------------------------------------------------
begin "smoke script under neoverse-n1 and max,sme=off,sve256=on"
"$host_py" scripts/aarch64_smoke.py "$wrapper" neoverse-n1 max,sme=off,sve256=on
end smoke

# --- 5. pytest -------------------------------------------------------------------------------------------------
# -p no:cacheprovider: nothing written into the clone's .pytest_cache by the aarch64 run.
run_pytest() {  # CPU TEST...
  local cpu=$1 start status=0
  shift
  start=$(date +%s)
  env QEMU_CPU="$cpu" CTRANSFORMER_PROGRESS=0 "$wrapper" -m pytest -q -p no:cacheprovider --durations=5 "$@" ||
    status=$?
  echo "== aarch64: pytest as $cpu on $*: exited $status after $(( $(date +%s) - start )) s"
  return $status
}
begin "pytest, two shards side by side"
status_a=0 status_b=0
if [ ${#shard_b[@]} -gt 0 ]; then
  # The second shard's output is kept apart and printed after the first's, so the two do not interleave.
  ( status=0
    run_pytest neoverse-n1 "${shard_b[@]}" || status=1
    run_pytest max,sme=off,sve256=on "${sve_tests[@]}" || status=1
    # An ARMv8.0 CPU without SDOT: the NEON int8 kernel, chosen by itself, against the exact reference. Without
    # conftest.py, which imports torch: the aarch64 torch wheel does not run on a Cortex-A72. Its thread-count
    # fixtures come as a plugin (tests/ is on the wrapper's PYTHONPATH, as conftest.py puts it on sys.path).
    run_pytest cortex-a72 --noconftest -p runtime_fixtures tests/ops/test_ops_int8.py || status=1
    exit $status ) > "$build/pytest-shard-b.log" 2>&1 &
  shard_b_pid=$!
fi
run_pytest neoverse-n1 "${shard_a[@]}" || status_a=$?
if [ ${#shard_b[@]} -gt 0 ]; then
  wait "$shard_b_pid" || status_b=$?
  echo "== aarch64: the second shard's output ($build/pytest-shard-b.log):"
  cat "$build/pytest-shard-b.log"
fi
end pytest
[ "$status_a" -eq 0 ] && [ "$status_b" -eq 0 ]
