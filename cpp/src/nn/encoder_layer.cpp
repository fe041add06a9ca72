#include "ctransformer/nn/encoder_layer.hpp"

#include <algorithm>

#include "ctransformer/error.hpp"
#include "ctransformer/runtime/autograd.hpp"

namespace ct::nn {

EncoderLayer::EncoderLayer(std::size_t d_model, std::size_t d_inner, std::size_t n_head, std::size_t d_k,
                           std::size_t d_v, float dropout, const SublayerOptions& o) {
    slf_attn = std::make_shared<MultiHeadAttention>(n_head, d_model, d_k, d_v, dropout, o);
    pos_ffn = std::make_shared<PositionwiseFeedForward>(d_model, d_inner, dropout, o);
    if (o.layout == Layout::Marian) {   // MarianEncoderLayer: the sub-layers' parts by name, in its order
        register_module("self_attn", slf_attn);
        register_module("self_attn_layer_norm", slf_attn->layer_norm);
        register_module("fc1", pos_ffn->w_1);
        register_module("fc2", pos_ffn->w_2);
        register_module("final_layer_norm", pos_ffn->layer_norm);
        register_module("ffn", pos_ffn);   // parameter-free here: its dropouts
        return;
    }
    const bool post_norm_names = o.layout == Layout::PostNorm;
    register_module(post_norm_names ? "slf_attn" : "mh", slf_attn);
    register_module(post_norm_names ? "pos_ffn" : "fc", pos_ffn);
}

std::pair<Tensor, Tensor> EncoderLayer::forward(const Tensor& enc_input, const Mask* slf_attn_mask,
                                                const std::vector<std::size_t>* read_rows) const {
    auto [out, attn] = slf_attn->forward(enc_input, enc_input, enc_input, slf_attn_mask);
    if (!read_rows) return {pos_ffn->forward(out), attn};
    // The feed-forward is row by row: run it on the rows read, gathered, and put them back in place (the
    // attention's output is this layer's own, with no graph to keep).
    if (grad_enabled()) throw ValueError("EncoderLayer.forward: read_rows is for inference (no_grad) only");
    const std::size_t d = out.size(-1), n = read_rows->size();
    Tensor rows(Array::from_shape({n, d}));
    for (std::size_t i = 0; i < n; ++i) std::copy_n(out.data() + (*read_rows)[i] * d, d, rows.data() + i * d);
    const Tensor y = pos_ffn->forward(rows);
    for (std::size_t i = 0; i < n; ++i) std::copy_n(y.data() + i * d, d, out.data() + (*read_rows)[i] * d);
    return {out, attn};
}

}  // namespace ct::nn
