#include "ctransformer/nn/encoder_layer.hpp"

namespace ct::nn {

EncoderLayer::EncoderLayer(std::size_t d_model, std::size_t d_inner, std::size_t n_head, std::size_t d_k,
                           std::size_t d_v, float dropout, const SublayerOptions& o) {
    slf_attn = std::make_shared<MultiHeadAttention>(n_head, d_model, d_k, d_v, dropout, o);
    pos_ffn = std::make_shared<PositionwiseFeedForward>(d_model, d_inner, dropout, o);
    const bool post_norm_names = o.layout == Layout::PostNorm;
    register_module(post_norm_names ? "slf_attn" : "mh", slf_attn);
    register_module(post_norm_names ? "pos_ffn" : "fc", pos_ffn);
}

std::pair<Tensor, Tensor> EncoderLayer::forward(const Tensor& enc_input, const Mask* slf_attn_mask) const {
    auto [out, attn] = slf_attn->forward(enc_input, enc_input, enc_input, slf_attn_mask);
    return {pos_ffn->forward(out), attn};
}

}  // namespace ct::nn
