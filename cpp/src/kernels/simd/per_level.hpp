// Included by every .cpp of kernels/simd/, which CMake compiles once per level (tables.hpp): CT_LOOP_LEVEL
// is the level's name (portable, avx2, avx512), its functions go in namespace ct::kernels::CT_LOOP_LEVEL,
// and simd.hpp's helpers in ct::simd::CT_LOOP_LEVEL (an inline namespace), so no two levels define one
// symbol: the linker keeps one copy of a symbol defined twice, and the AVX-512 copy of a helper would then
// run on a CPU without AVX-512. CMake checks each level's objects for such shared symbols
// (cmake/check_loop_symbols.cmake).
#pragma once

// CMake sets CT_LOOP_LEVEL for each of its three compiles. A file compiled on its own (a tool, an editor, a
// check of every -march) takes the level its flags give, so it compiles the same code CMake's would.
#ifndef CT_LOOP_LEVEL
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
#define CT_LOOP_LEVEL avx512
#define CT_LOOP_PORTABLE 0
#elif defined(__AVX2__) && defined(__FMA__)
#define CT_LOOP_LEVEL avx2
#define CT_LOOP_PORTABLE 0
#else
#define CT_LOOP_LEVEL portable
#define CT_LOOP_PORTABLE 1
#endif
#endif

// GCC 12's AVX-512 headers start some intrinsics from an "undefined" vector (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define CT_SIMD_NS CT_LOOP_LEVEL
#include "../../simd.hpp"
#include "tables.hpp"

#define CT_LOOP_CAT_(a, b) a##_##b
#define CT_LOOP_CAT(a, b) CT_LOOP_CAT_(a, b)
// The group's table of this level: `CT_LOOP_TABLE(SoftmaxLoops, softmax) = {...};` at namespace ct::kernels.
#define CT_LOOP_TABLE(Type, group) extern const Type CT_LOOP_CAT(group, CT_LOOP_LEVEL); const Type CT_LOOP_CAT(group, CT_LOOP_LEVEL)
// <group>(), in the portable build only.
#if CT_LOOP_PORTABLE
#define CT_LOOP_SELECT(Type, group) \
    const Type& group() { return *static_cast<const Type*>(CT_LOOP_PICK(group)); }
#else
#define CT_LOOP_SELECT(Type, group)
#endif
