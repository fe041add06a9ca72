// What each level's loops were compiled for (tables.hpp): xsimd's instruction set, floats a vector, and
// whether a multiply-add rounds once. ct.show_config() prints the level in force's.
#pragma once
#include <cstddef>

#include "tables.hpp"

namespace ct::kernels {

struct LoopArchTable {
    const char* name;  // "sse2", "fma3+avx2", "avx512bw", "neon64", ...
    std::size_t float_lanes;
    bool fused_multiply_add;
};

CT_LOOP_TABLES(LoopArchTable, loop_arch_table)

}  // namespace ct::kernels
