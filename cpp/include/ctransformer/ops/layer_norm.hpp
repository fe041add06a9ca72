// Layer normalisation over the last dimension:
// y = (x - mean) / sqrt(var + eps) * weight + bias, var biased (divided by D), as torch.
#pragma once
#include "ctransformer/runtime/tensor.hpp"

namespace ct {

Tensor layer_norm(const Tensor& x, const Tensor* weight, const Tensor* bias, float eps);

}  // namespace ct
