// Scaled dot-product attention (seed 000): attn = dropout(softmax(q / sqrt(d_k) @ k^T, masked)),
// out = attn @ v. `mask` is nonzero where a query may attend to a key (the seeds' mask == 0 is
// filled with fill_value, -1e9 in seed 000, -inf in seeds 003/004) and broadcasts to the scores'
// shape (..., Lq, Lk). Returns (out, attn); both are differentiable.
#pragma once
#include <utility>

#include "ctransformer/tensor.hpp"

namespace ct {

std::pair<Tensor, Tensor> scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                                       const Mask* mask = nullptr, float dropout_p = 0.0f,
                                                       float fill_value = -1e9f, bool training = true);

}  // namespace ct
