// Matrix products on BLAS. Both operands have rank >= 2; the leading (batch) dimensions broadcast
// like torch.matmul. trans_a / trans_b transpose the last two dimensions through BLAS flags
// instead of copying (attention's q @ k^T).
#pragma once
#include "ctransformer/runtime/tensor.hpp"

namespace ct {

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

}  // namespace ct
