// Attention masks as jadore801120's reference builds them (Models.py): nonzero = may attend.
#pragma once
#include <cstdint>

#include "ctransformer/runtime/tensor.hpp"

namespace ct::nn {

// (seq != pad_idx).unsqueeze(-2): (b, 1, len) for a (b, len) batch of ids.
Mask get_pad_mask(const IndexArray& seq, std::int64_t pad_idx);
// The no-peek mask (1, len, len): true on and below the diagonal, len = seq.size(1).
Mask get_subsequent_mask(const IndexArray& seq);
Mask get_subsequent_mask(std::size_t len);
// Elementwise AND with NumPy broadcasting, e.g. (b, 1, len) & (1, len, len) -> (b, len, len).
Mask mask_and(const Mask& a, const Mask& b);

}  // namespace ct::nn
