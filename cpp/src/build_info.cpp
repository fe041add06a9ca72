#include "ctransformer/build_info.hpp"

#include "ctransformer/distributed/process_group.hpp"
#include "simd.hpp"

#ifndef CT_MARCH
#define CT_MARCH ""
#endif

namespace ct {

BuildInfo build_info() {
    BuildInfo info;
    info.march = CT_MARCH;
    info.simd = simd::B::arch_type::name();
    info.float_lanes = simd::W;
    info.fused_multiply_add = simd::fused_multiply_add;
#if defined(__AVX512F__) || defined(__AVX2__)
    info.masked_tails = true;
#else
    info.masked_tails = false;
#endif
    info.mpi = distributed::available();
    return info;
}

}  // namespace ct
