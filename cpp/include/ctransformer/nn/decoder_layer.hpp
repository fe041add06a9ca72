// DecoderLayer (seed 000, Layers.py): masked self-attention, encoder-decoder attention with
// K = V = the encoder output, then the feed-forward. Seed 003 names them mhl, mh2 and fc.
#pragma once
#include <memory>
#include <tuple>

#include "ctransformer/nn/multi_head_attention.hpp"
#include "ctransformer/nn/positionwise_feed_forward.hpp"

namespace ct::nn {

class DecoderLayer : public Module {
public:
    DecoderLayer(std::size_t d_model, std::size_t d_inner, std::size_t n_head, std::size_t d_k, std::size_t d_v,
                 float dropout = 0.1f, const SublayerOptions& options = {});
    // Returns (dec_output, dec_slf_attn, dec_enc_attn).
    std::tuple<Tensor, Tensor, Tensor> forward(const Tensor& dec_input, const Tensor& enc_output,
                                               const Mask* slf_attn_mask = nullptr,
                                               const Mask* dec_enc_attn_mask = nullptr) const;
    std::string type_name() const override { return "DecoderLayer"; }

    std::shared_ptr<MultiHeadAttention> slf_attn, enc_attn;
    std::shared_ptr<PositionwiseFeedForward> pos_ffn;
};

}  // namespace ct::nn
