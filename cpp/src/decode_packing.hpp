// The packed copies behind ct::decode::PackedWeights (decode/packed_weights.hpp; the kernel: blas_packed.hpp).
// Per thread, as autocast's bf16 copies: one thread's decoding cannot free what another's is reading.
#pragma once
#include "blas_packed.hpp"
#include "ctransformer/decode/packed_weights.hpp"
#include "ctransformer/tensor.hpp"

namespace ct::decode_packing {

// w's packed copy (made on its second use while this thread holds a PackedWeights), or null: on its first
// use, outside a region, for a tensor that is not a parameter (leaf requiring grad) of rank 2, or on a CPU
// without the kernel.
const blas::PackedWeight* weight(const Tensor& w);

}  // namespace ct::decode_packing
