// EncoderLayer (jadore801120's Layers.py): self-attention, then the position-wise feed-forward.
// The pre-norm model names its parts mh and fc; the post-norm one slf_attn and pos_ffn.
#pragma once
#include <memory>
#include <utility>
#include <vector>

#include "ctransformer/nn/multi_head_attention.hpp"
#include "ctransformer/nn/positionwise_feed_forward.hpp"

namespace ct::nn {

class EncoderLayer : public Module {
public:
    EncoderLayer(std::size_t d_model, std::size_t d_inner, std::size_t n_head, std::size_t d_k, std::size_t d_v,
                 float dropout = 0.1f, const SublayerOptions& options = {});
    // Returns (enc_output, enc_slf_attn). read_rows (decoding, no graph): the rows of batch x length whose outputs
    // anything reads (Encoder::forward); the feed-forward runs on those alone, and the others keep the
    // attention's output.
    std::pair<Tensor, Tensor> forward(const Tensor& enc_input, const Mask* slf_attn_mask = nullptr,
                                      const std::vector<std::size_t>* read_rows = nullptr) const;
    std::string type_name() const override { return "EncoderLayer"; }

    std::shared_ptr<MultiHeadAttention> slf_attn;
    std::shared_ptr<PositionwiseFeedForward> pos_ffn;
};

}  // namespace ct::nn
