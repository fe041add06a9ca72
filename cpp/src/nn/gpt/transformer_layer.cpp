#include "ctransformer/nn/gpt/transformer_layer.hpp"

#include "ctransformer/ops/elementwise.hpp"

namespace ct::nn::gpt {

TransformerLayer::TransformerLayer(std::size_t embed_dim, std::size_t num_head, std::size_t feedforward_dim,
                                   float dropout, bool no_residual)
    : no_res_(no_residual) {
    norm1_ = register_module("norm1", std::make_shared<LayerNorm>(embed_dim));
    attn_ = register_module("attn", std::make_shared<SelfAttention>(embed_dim, num_head, dropout));
    norm2_ = register_module("norm2", std::make_shared<LayerNorm>(embed_dim));
    ffn_ = register_module("ffn", std::make_shared<FFN>(embed_dim, feedforward_dim, dropout));
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
