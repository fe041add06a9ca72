// ScaledDotProductAttention(temperature, attn_dropout) (jadore801120's Modules.py):
//   attn = dropout(softmax(masked_fill(q / temperature @ k^T, mask == 0, fill))), output = attn @ v.
// With scale_after_matmul the scores are (q @ k^T) / temperature, as the pre-norm reference writes it.
#pragma once
#include <memory>
#include <utility>

#include "ctransformer/nn/dropout.hpp"
#include "ctransformer/nn/module.hpp"

namespace ct::nn {

class ScaledDotProductAttention : public Module {
public:
    explicit ScaledDotProductAttention(float temperature, float attn_dropout = 0.1f, float mask_fill = -1e9f,
                                       bool scale_after_matmul = false);
    // q (..., Lq, d_k), k (..., Lk, d_k), v (..., Lk, d_v); mask nonzero where a query may attend,
    // broadcasting to (..., Lq, Lk). Returns (output (..., Lq, d_v), attn (..., Lq, Lk)).
    std::pair<Tensor, Tensor> forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Mask* mask = nullptr) const;
    std::string type_name() const override { return "ScaledDotProductAttention"; }

    const float temperature, mask_fill;
    const bool scale_after_matmul;
    std::shared_ptr<Dropout> dropout;
};

}  // namespace ct::nn
