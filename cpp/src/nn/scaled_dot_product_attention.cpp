#include "ctransformer/nn/scaled_dot_product_attention.hpp"

#include "ctransformer/error.hpp"
#include "ctransformer/ops/elementwise.hpp"
#include "ctransformer/ops/masked_fill.hpp"
#include "ctransformer/ops/matmul.hpp"
#include "ctransformer/ops/softmax.hpp"

namespace ct::nn {

ScaledDotProductAttention::ScaledDotProductAttention(float t, float attn_dropout, float fill, bool after)
    : temperature(t), mask_fill(fill), scale_after_matmul(after) {
    if (!(t > 0.0f)) throw ValueError("ScaledDotProductAttention: temperature must be positive, got " + std::to_string(t));
    dropout = register_module("dropout", std::make_shared<Dropout>(attn_dropout));
}

std::pair<Tensor, Tensor> ScaledDotProductAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                                             const Mask* mask) const {
    if (q.dim() < 2 || k.dim() < 2 || v.dim() < 2 || q.size(-1) != k.size(-1) || k.size(-2) != v.size(-2))
        throw ValueError("ScaledDotProductAttention.forward: expected q (..., Lq, d_k), k (..., Lk, d_k) and "
                         "v (..., Lk, d_v), got q " + shape_str(q.shape()) + ", k " + shape_str(k.shape()) + ", v " +
                         shape_str(v.shape()));
    Tensor scores = scale_after_matmul ? div_scalar(matmul(q, k, false, true), temperature)
                                       : matmul(div_scalar(q, temperature), k, false, true);   // (..., Lq, Lk)
    if (mask) {   // the seeds fill where the mask forbids attending (mask == 0)
        Mask forbidden{std::vector<std::uint8_t>(mask->data.size()), mask->shape};
        for (std::size_t i = 0; i < mask->data.size(); ++i) forbidden.data[i] = mask->data[i] == 0;
        scores = masked_fill(scores, forbidden, mask_fill);
    }
    Tensor attn = dropout->forward(softmax(scores, -1));
    return {matmul(attn, v), attn};
}

}  // namespace ct::nn
