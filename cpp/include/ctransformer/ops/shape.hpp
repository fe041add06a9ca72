// Shape changes. The results own fresh contiguous storage (the library keeps every tensor
// contiguous so kernels can walk raw buffers).
#pragma once
#include <vector>

#include "ctransformer/runtime/tensor.hpp"

namespace ct {

// One entry may be -1 (inferred), as torch.reshape.
Tensor reshape(const Tensor& x, const std::vector<std::int64_t>& shape);
Tensor permute(const Tensor& x, const std::vector<std::int64_t>& dims);
Tensor transpose(const Tensor& x, std::int64_t dim0, std::int64_t dim1);

}  // namespace ct
