// arch.hpp's facts, for one level.
#include "arch.hpp"

#include "per_level.hpp"

namespace ct::kernels {

CT_LOOP_TABLE(LoopArchTable, loop_arch_table) = {simd::B::arch_type::name(), simd::W, simd::fused_multiply_add};
CT_LOOP_SELECT(LoopArchTable, loop_arch_table)

}  // namespace ct::kernels
