// y = x @ W^T + b for x (..., in_features), W (out_features, in_features), b (out_features,).
#pragma once
#include "ctransformer/tensor.hpp"

namespace ct {

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor* bias = nullptr);

}  // namespace ct
