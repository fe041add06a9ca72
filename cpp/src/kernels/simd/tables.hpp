// The SIMD loops (softmax, layer_norm, activations, Adam, losses, attention's inner loops, decoding's
// searches) are compiled once per level into the same library, and each op asks for the table of the level
// in force (kernels/level.hpp), so one binary runs AVX-512, AVX2 or plain SSE2 loops wherever it is. A group
// of loops is a struct of function pointers, declared in its header here with CT_LOOP_TABLES:
//
//   <group>_portable  the x86-64 baseline (SSE2), or the build's own target elsewhere (aarch64: NEON)
//   <group>_avx2      AVX2 + FMA, 8 floats a vector
//   <group>_avx512    AVX-512 F/CD/BW/DQ/VL, 16 floats a vector
//   <group>()         the table of the level in force
//
// The group's .cpp (CMake compiles every .cpp of this folder once per level, with that level's flags and
// CT_LOOP_LEVEL naming it) defines its functions in ct::kernels::<level> (per_level.hpp) and its table with
// CT_LOOP_TABLE; the portable build of it also defines <group>() (CT_LOOP_SELECT), so nothing wider than the
// baseline runs before the level says it may. Every level's loops give the same numbers within float32's
// summation-order bound (wider vectors add in another order; FMA rounds once), and the tests run each.
#pragma once

namespace ct::kernels {

// The table of the level in force among the three (level.cpp): avx512's from level avx512 up, avx2's at
// avx2 and avx2_vnni, else portable's. Off x86-64 the three are the same table.
const void* table_for_level(const void* portable, const void* avx2, const void* avx512);

}  // namespace ct::kernels

#if defined(__x86_64__)
#define CT_LOOP_TABLES(Type, group)                                                          \
    extern const Type group##_portable;                                                      \
    extern const Type group##_avx2;                                                          \
    extern const Type group##_avx512;                                                        \
    const Type& group();
#define CT_LOOP_PICK(group) ::ct::kernels::table_for_level(&group##_portable, &group##_avx2, &group##_avx512)
#else
#define CT_LOOP_TABLES(Type, group)                                                          \
    extern const Type group##_portable;                                                      \
    const Type& group();
#define CT_LOOP_PICK(group) ::ct::kernels::table_for_level(&group##_portable, &group##_portable, &group##_portable)
#endif
