#!/bin/sh
# CMake's compiler launcher for the test builds (the Makefile's test targets set CMAKE_CXX_COMPILER_LAUNCHER to
# this file, and the tests' own compiles use it too): ccache when it is installed, else the compiler itself.
# A CI run on a fresh clone then compiles only what changed since the last run on this machine: the package,
# the C++ examples, the ASan/TSan builds, the aarch64 cross-build and the per-level compile checks are the same
# objects each time (about 25 of CI's 47 minutes when compiled from nothing).
# The cache is ~/.cache/ctransformer/ccache (delete it at will). Paths under the clone are hashed relative to
# the build folder (base_dir), so a clone elsewhere reuses the objects of builds made inside it.
if command -v ccache >/dev/null 2>&1; then
  root=$(cd "$(dirname "$0")/.." && pwd)
  export CCACHE_DIR="${CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ctransformer/ccache}"
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
  # The build folder's own path is not part of an object's identity. (The sanitizer builds have -g: their
  # debug info may then name the folder of the build that first compiled an object; a report's file names
  # and lines stay right.)
  export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
  export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
  exec ccache "$@"
fi
exec "$@"
