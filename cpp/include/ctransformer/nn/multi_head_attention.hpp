// MultiHeadAttention(n_head, d_model, d_k, d_v, dropout) (seed 000, SubLayers.py), and seed 003's
// MultiHead through SublayerOptions:
//   post-norm (seed 000): LN(q + dropout(fc(concat_h attention(w_qs q, w_ks k, w_vs v))))
//   pre-norm  (seed 003): q + dropout(fc(concat_h attention(w_qs LN(q), w_ks LN(k), w_vs LN(v))))
// q, k and v are separate inputs (self-attention passes one tensor three times), so a key/value
// cache for incremental decoding can later feed k and v without touching this code.
#pragma once
#include <memory>
#include <utility>

#include "ctransformer/nn/dropout.hpp"
#include "ctransformer/nn/layer_norm.hpp"
#include "ctransformer/nn/linear.hpp"
#include "ctransformer/nn/scaled_dot_product_attention.hpp"
#include "ctransformer/nn/transformer_config.hpp"

namespace ct::nn {

class MultiHeadAttention : public Module {
public:
    MultiHeadAttention(std::size_t n_head, std::size_t d_model, std::size_t d_k, std::size_t d_v,
                       float dropout = 0.1f, const SublayerOptions& options = {});
    // q (b, Lq, d_model), k and v (b, Lk, d_model); mask (b or 1, Lq or 1, Lk), nonzero = may attend,
    // broadcast over the heads. Returns (output (b, Lq, d_model), attn (b, n_head, Lq, Lk)).
    std::pair<Tensor, Tensor> forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Mask* mask = nullptr) const;
    // forward() after its key/value projections: q_in is what w_qs reads (LN(q) pre-norm, else q),
    // keys (b, capacity, n_head * d_k) and values (b, capacity, n_head * d_v) are w_ks / w_vs of the
    // keys'/values' input, of which positions [0, kv_length) are attended (0: all); the mask's Lk is
    // that length. A decoding cache feeds its keys/values here (decode/cached_attention.hpp).
    std::pair<Tensor, Tensor> attend(const Tensor& q, const Tensor& q_in, const Tensor& keys, const Tensor& values,
                                     const Mask* mask = nullptr, std::size_t kv_length = 0) const;
    std::string type_name() const override { return "MultiHeadAttention"; }

    const std::size_t n_head, d_model, d_k, d_v;
    const SublayerOptions options;
    // Seed 000 names: w_qs, w_ks, w_vs, fc, attention, dropout, layer_norm.
    // Seed 003 names: fc_Q, fc_K, fc_V, out_fc, norm, DropOut (and attention, parameter-free).
    std::shared_ptr<Linear> w_qs, w_ks, w_vs, fc;
    std::shared_ptr<ScaledDotProductAttention> attention;
    std::shared_ptr<Dropout> dropout;
    std::shared_ptr<LayerNorm> layer_norm;
};

}  // namespace ct::nn
