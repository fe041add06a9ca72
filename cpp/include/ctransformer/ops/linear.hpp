// y = x @ W^T + b for x (..., in_features), W (out_features, in_features), b (out_features,).
#pragma once
#include "ctransformer/int8.hpp"
#include "ctransformer/runtime/tensor.hpp"

namespace ct {

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor* bias = nullptr);
// y = alpha x @ W^T + b: a scale of the product folded into the gemm (no extra pass, no extra
// buffer), e.g. the post-norm Transformer's logits * d_model^-0.5.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor* bias, float alpha);

// The same with the weight in int8 (int8.hpp). It runs anywhere but has no gradient (torch's dynamic
// quantisation): where x, the bias or float_weight (the float32 parameter the int8 weight was made from, if
// any) needs a gradient, the output records no graph through the product, and a backward reaching it raises.
Tensor linear_int8(const Tensor& x, const Int8Weight& weight, const Tensor* bias, float alpha = 1.0f,
                   const Tensor* float_weight = nullptr);

}  // namespace ct
