// Sums and means over every element (a 0-dim result, like torch) or over one dimension.
#pragma once
#include "ctransformer/runtime/tensor.hpp"

namespace ct {

Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);
Tensor sum(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x, std::int64_t dim, bool keepdim = false);

}  // namespace ct
