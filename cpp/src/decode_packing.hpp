// The packed copies behind ct::decode::PackedWeights (decode/packed_weights.hpp; the kernel: kernels/fp32/packed.hpp).
// Per thread, as autocast's bf16 copies: one thread's decoding cannot free what another's is reading.
#pragma once
#include "kernels/fp32/packed.hpp"
#include "ctransformer/decode/packed_weights.hpp"
#include "ctransformer/tensor.hpp"

namespace ct::decode_packing {

// w's packed copy for a product (of 3 or more rows: the caller's test), or null: outside a region (this thread
// holds no PackedWeights), for a tensor that is not a parameter (leaf requiring grad) of rank 2, on a CPU without
// the kernel, and on the weight's first product in the region (see decode_packing.cpp).
const blas::PackedWeight* weight(const Tensor& w);

}  // namespace ct::decode_packing
