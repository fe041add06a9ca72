// What this build of the core was compiled for: the instruction set its kernels use and how
// wide their vectors are. Numbers differ in the last bits between levels (sums over wider
// vectors add in another order; without FMA a multiply-add rounds twice), so this is worth
// knowing when comparing runs from two machines.
#pragma once
#include <cstddef>
#include <string>

namespace ct {

struct BuildInfo {
    std::string march;          // the -march the core was built with ("native", "x86-64-v3", "" = compiler default)
    std::string simd;           // xsimd's instruction set for the kernels ("avx512bw", "fma3+avx2", "sse2", "neon64", ...)
    std::size_t float_lanes;    // floats per vector in the kernels
    bool fused_multiply_add;    // multiply-adds rounded once (Adam's moments equal torch's fused kernels bit for bit)
    bool masked_tails;          // vector tails by masked loads/stores (AVX2, AVX-512) rather than a padded copy
    bool mpi;                   // data-parallel training over MPI built in (CTRANSFORMER_MPI)
};

BuildInfo build_info();

}  // namespace ct
