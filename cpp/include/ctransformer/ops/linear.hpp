// y = x @ W^T + b for x (..., in_features), W (out_features, in_features), b (out_features,).
#pragma once
#include <vector>

#include "ctransformer/int8.hpp"
#include "ctransformer/runtime/tensor.hpp"

namespace ct {

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor* bias = nullptr);
// y = alpha x @ W^T + b: a scale of the product folded into the gemm (no extra pass, no extra
// buffer), e.g. the post-norm Transformer's logits * d_model^-0.5.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor* bias, float alpha);

// Several Linears of one input: y_i = x @ W_i^T + b_i for each (W_i, b_i) (b_i may be null), each y_i the bits of
// linear(x, W_i, b_i). A decoding step's one or two float32 rows (no autocast, no gradient) read all the weights in
// one product split over the threads, where one at a time would hand each to them in turn (GPT's q, k and v).
struct LinearOperands {
    const Tensor* weight;
    const Tensor* bias;
};
std::vector<Tensor> linear_of_shared_input(const Tensor& x, const std::vector<LinearOperands>& layers);

// The same with the weight in int8 (int8.hpp). It runs anywhere but has no gradient (torch's dynamic
// quantisation): where x, the bias or float_weight (the float32 parameter the int8 weight was made from, if
// any) needs a gradient, the output records no graph through the product, and a backward reaching it raises.
Tensor linear_int8(const Tensor& x, const Int8Weight& weight, const Tensor* bias, float alpha = 1.0f,
                   const Tensor* float_weight = nullptr);

}  // namespace ct
