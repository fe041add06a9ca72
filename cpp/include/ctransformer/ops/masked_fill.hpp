// out = x where mask is false, value where mask is true (torch.masked_fill). The mask broadcasts
// to x's shape; the gradient is zero at the filled positions.
#pragma once
#include "ctransformer/runtime/tensor.hpp"

namespace ct {

Tensor masked_fill(const Tensor& x, const Mask& mask, float value);

}  // namespace ct
