// TransformerLayer(embed_dim, num_head, feedforward_dim, dropout, no_res): seed 004's pre-norm
// decoder block.
//   x_attn = attn(norm1(x)) + x          (without "+ x" when no_res)
//   out    = ffn(norm2(x_attn)) + x_attn (without "+ x_attn" when no_res)
// Returns (out, attention weights of the block).
#pragma once
#include <memory>
#include <utility>

#include "ctransformer/nn/gpt/ffn.hpp"
#include "ctransformer/nn/gpt/self_attention.hpp"
#include "ctransformer/nn/layer_norm.hpp"

namespace ct::nn::gpt {

class TransformerLayer : public Module {
public:
    TransformerLayer(std::size_t embed_dim, std::size_t num_head, std::size_t feedforward_dim, float dropout,
                     bool no_res = false);
    std::pair<Tensor, Tensor> forward(const Tensor& x) const;
    std::string type_name() const override { return "TransformerLayer"; }

    std::shared_ptr<LayerNorm> norm1;
    std::shared_ptr<SelfAttention> attn;
    std::shared_ptr<LayerNorm> norm2;
    std::shared_ptr<FFN> ffn;
    const bool no_res;
};

}  // namespace ct::nn::gpt
