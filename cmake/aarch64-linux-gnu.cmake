# Cross-compiling the core and the extension for 64-bit ARM Linux (make test-aarch64, scripts/test_aarch64.sh).
# The compilers are Debian's g++-aarch64-linux-gnu, which bring their own C library and headers
# (/usr/aarch64-linux-gnu). Everything else the target needs (Python's headers, xtensor and its
# friends) comes from an arm64 Debian tree that the script extracts with mmdebstrap; its path is
# CT_AARCH64_ROOT (a cache variable, or the environment variable of that name).
#
#   cmake -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DCT_AARCH64_ROOT=/path/to/tree \
#         -DPython_EXECUTABLE=<a wrapper running the tree's python3.11 under qemu-aarch64> ...
#
# Python_EXECUTABLE must be an aarch64 interpreter (run under qemu): CMake and pybind11 ask it for the
# module suffix (cpython-311-aarch64-linux-gnu) and CMakeLists.txt asks it where scipy_openblas32's
# aarch64 library lies. The host's interpreter would answer x86_64 to both.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

if(NOT CT_AARCH64_ROOT AND DEFINED ENV{CT_AARCH64_ROOT})
  set(CT_AARCH64_ROOT "$ENV{CT_AARCH64_ROOT}")
endif()
if(NOT CT_AARCH64_ROOT)
  message(FATAL_ERROR "aarch64-linux-gnu.cmake: set CT_AARCH64_ROOT to the arm64 Debian tree "
                      "(scripts/test_aarch64.sh makes one)")
endif()
set(CT_AARCH64_ROOT "${CT_AARCH64_ROOT}" CACHE PATH "The arm64 Debian tree the target's headers and packages come from")
# try_compile projects re-read this file in a fresh scope: hand them the tree too.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES CT_AARCH64_ROOT)

# Programs (ninja, nm, the compilers) from the host; libraries, headers and CMake packages from the tree only,
# so no x86-64 xtensor config or Python header is picked up by mistake. (A package named by an explicit
# <Name>_DIR, as pybind11_DIR from the host's .venv, is taken from there: pybind11 is headers and CMake code
# only, and Debian bookworm's 2.10 is older than the >= 3 the project needs.)
set(CMAKE_FIND_ROOT_PATH "${CT_AARCH64_ROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# The tree's shared libraries depend on others in it; the linker must find those without installing them.
set(ct_rpath_link "-Wl,-rpath-link,${CT_AARCH64_ROOT}/usr/lib/aarch64-linux-gnu -Wl,-rpath-link,${CT_AARCH64_ROOT}/lib/aarch64-linux-gnu")
set(CMAKE_EXE_LINKER_FLAGS_INIT "${ct_rpath_link}")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "${ct_rpath_link}")
set(CMAKE_MODULE_LINKER_FLAGS_INIT "${ct_rpath_link}")

# A target program that CMake runs (none today, but try_run would) goes through qemu-user.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -cpu neoverse-n1 -L "${CT_AARCH64_ROOT}")
