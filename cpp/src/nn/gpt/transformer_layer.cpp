#include "ctransformer/nn/gpt/transformer_layer.hpp"

#include <cmath>
#include <optional>

#include "ctransformer/ops/elementwise.hpp"

namespace ct::nn::gpt {

namespace {

// The scores' factor (GPT-2's _attn): 1 / sqrt(head size) when scale_attn_weights, then 1 / (index + 1) when
// scale_attn_by_inverse_layer_idx; one factor, where transformers divides twice (the same up to a rounding).
// None for the seed's own 1 / sqrt(head size), which SelfAttention computes as it always has.
std::optional<float> attention_scale(std::size_t embed_dim, std::size_t num_head, const Options& o,
                                     std::size_t index) {
    if (o.scale_attn_weights && !o.scale_attn_by_inverse_layer_idx) return std::nullopt;
    float scale = o.scale_attn_weights && num_head > 0 ? 1.0f / std::sqrt(float(embed_dim / num_head)) : 1.0f;
    if (o.scale_attn_by_inverse_layer_idx) scale /= float(index + 1);
    return scale;
}

}  // namespace

TransformerLayer::TransformerLayer(std::size_t embed_dim, std::size_t num_head, std::size_t feedforward_dim,
                                   float dropout, bool no_residual, const Options& options, std::size_t index)
    : no_res_(no_residual) {
    norm1_ = register_module("norm1", std::make_shared<LayerNorm>(embed_dim, options.layer_norm_epsilon));
    attn_ = register_module("attn", std::make_shared<SelfAttention>(
                                        embed_dim, num_head, dropout,
                                        attention_scale(embed_dim, num_head, options, index)));
    norm2_ = register_module("norm2", std::make_shared<LayerNorm>(embed_dim, options.layer_norm_epsilon));
    ffn_ = register_module("ffn", std::make_shared<FFN>(embed_dim, feedforward_dim, dropout, options.activation));
}

std::pair<Tensor, Tensor> TransformerLayer::forward(const Tensor& x, KeyValue* cache) const {
    auto [x_attn, weights] = attn_->forward(norm1_->forward(x), cache);
    if (!no_res_) x_attn = add(x_attn, x);
    Tensor x_ffn = ffn_->forward(norm2_->forward(x_attn));
    return {no_res_ ? x_ffn : add(x_ffn, x_attn), weights};
}

Tensor TransformerLayer::forward_sequences(const Tensor& x, const std::vector<KeyValue*>& caches,
                                           const std::vector<std::size_t>& offsets) const {
    Tensor x_attn = attn_->forward_sequences(norm1_->forward(x), caches, offsets);
    if (!no_res_) x_attn = add(x_attn, x);
    Tensor x_ffn = ffn_->forward(norm2_->forward(x_attn));
    return no_res_ ? x_ffn : add(x_ffn, x_attn);
}

}  // namespace ct::nn::gpt
