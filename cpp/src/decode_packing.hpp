// The packed copies behind ct::decode::PackedWeights (decode/packed_weights.hpp; the kernel: blas_packed.hpp).
// Per thread, as autocast's bf16 copies: one thread's decoding cannot free what another's is reading.
#pragma once
#include "blas_packed.hpp"
#include "ctransformer/decode/packed_weights.hpp"
#include "ctransformer/tensor.hpp"

namespace ct::decode_packing {

// w's packed copy for a product of `rows` rows, or null: outside a region (this thread holds no
// PackedWeights), for a tensor that is not a parameter (leaf requiring grad) of rank 2, on a CPU without
// the kernel, and until the weight has been used often enough in the region to pay for its packing (see
// decode_packing.cpp).
const blas::PackedWeight* weight(const Tensor& w, std::size_t rows);

}  // namespace ct::decode_packing
