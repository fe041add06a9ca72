// y = x @ W^T + b for x (..., in_features), W (out_features, in_features), b (out_features,).
#pragma once
#include "ctransformer/int8.hpp"
#include "ctransformer/runtime/tensor.hpp"

namespace ct {

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor* bias = nullptr);
// y = alpha x @ W^T + b: a scale of the product folded into the gemm (no extra pass, no extra
// buffer), e.g. seed 000's logits * d_model^-0.5.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor* bias, float alpha);

// The same with the weight in int8 (int8.hpp), for inference: refused (ValueError) where a gradient would
// be needed, since nothing is recorded.
Tensor linear_int8(const Tensor& x, const Int8Weight& weight, const Tensor* bias, float alpha = 1.0f);

}  // namespace ct
