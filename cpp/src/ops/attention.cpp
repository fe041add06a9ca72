#include "ctransformer/ops/attention.hpp"

#include <cmath>

#include "ctransformer/error.hpp"
#include "ctransformer/ops/dropout.hpp"
#include "ctransformer/ops/elementwise.hpp"
#include "ctransformer/ops/masked_fill.hpp"
#include "ctransformer/ops/matmul.hpp"
#include "ctransformer/ops/softmax.hpp"

namespace ct {

// Composed from differentiable ops, so the returned attention weights carry gradients too.
std::pair<Tensor, Tensor> scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                                       const Mask* mask, float dropout_p, float fill_value,
                                                       bool training) {
    if (q.dim() < 2 || k.dim() < 2 || v.dim() < 2)
        throw ValueError("scaled_dot_product_attention: q, k and v need rank >= 2 (..., length, dim), got q " +
                         shape_str(q.shape()) + ", k " + shape_str(k.shape()) + ", v " + shape_str(v.shape()));
    if (q.size(-1) != k.size(-1))
        throw ValueError("scaled_dot_product_attention: q and k must share their last dimension d_k, got q " +
                         shape_str(q.shape()) + " and k " + shape_str(k.shape()));
    if (k.size(-2) != v.size(-2))
        throw ValueError("scaled_dot_product_attention: k and v must have the same length (dimension -2), got k " +
                         shape_str(k.shape()) + " and v " + shape_str(v.shape()));
    const float temperature = std::sqrt(float(q.size(-1)));
    Tensor scores = matmul(div_scalar(q, temperature), k, false, true);  // (..., Lq, Lk)
    if (mask) {
        // The mask must broadcast to the scores (..., Lq, Lk) on its own, as in the seeds.
        const Shape s = scores.shape(),& m = mask->shape;
        bool fits = m.size() <= s.size();
        for (std::size_t i = 0; fits && i < m.size(); ++i) {
            const std::size_t md = m[m.size() - 1 - i], sd = s[s.size() - 1 - i];
            fits = md == 1 || md == sd;
        }
        if (!fits)
            throw ValueError("scaled_dot_product_attention: mask of shape " + shape_str(m) +
                             " must broadcast to the scores' shape (..., Lq, Lk) = " + shape_str(s) +
                             ", e.g. (b, 1, Lk) or (b, 1, Lq, Lk)");
        Mask masked_out{std::vector<std::uint8_t>(mask->data.size()), mask->shape};
        for (std::size_t i = 0; i < mask->data.size(); ++i) masked_out.data[i] = mask->data[i] == 0;
        scores = masked_fill(scores, masked_out, fill_value);
    }
    Tensor attn = dropout(softmax(scores, -1), dropout_p, training);
    Tensor out = matmul(attn, v);
    return {out, attn};
}

}  // namespace ct
