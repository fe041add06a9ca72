// Softmax and log-softmax along one dimension, shifted by the maximum for stability.
#pragma once
#include "ctransformer/runtime/tensor.hpp"

namespace ct {

Tensor softmax(const Tensor& x, std::int64_t dim);
Tensor log_softmax(const Tensor& x, std::int64_t dim);

}  // namespace ct
