// TransformerLayer(embed_dim, num_head, feedforward_dim, dropout, no_res, options, index): the GPT's
// pre-norm decoder block, the index-th (from 0) of its model (GPT-2's options: gpt/options.hpp).
//   x_attn = attn(norm1(x)) + x          (without "+ x" when no_res)
//   out    = ffn(norm2(x_attn)) + x_attn (without "+ x_attn" when no_res)
// Returns (out, attention weights of the block). Cached decoding runs the same forward with the
// layer's KeyValue cache (the attention's keys/values of the positions fed so far).
#pragma once
#include <memory>
#include <utility>

#include "ctransformer/nn/gpt/ffn.hpp"
#include "ctransformer/nn/gpt/options.hpp"
#include "ctransformer/nn/gpt/self_attention.hpp"
#include "ctransformer/nn/kv_cache.hpp"
#include "ctransformer/nn/layer_norm.hpp"

namespace ct::nn::gpt {

class TransformerLayer : public Module {
public:
    TransformerLayer(std::size_t embed_dim, std::size_t num_head, std::size_t feedforward_dim, float dropout,
                     bool no_res = false, const Options& options = {}, std::size_t index = 0);
    // x (b, t, embed_dim). With a cache, x holds the positions after those it holds, and the attention
    // reads them all (SelfAttention::forward).
    std::pair<Tensor, Tensor> forward(const Tensor& x, KeyValue* cache = nullptr) const;
    // The same for one position of sequences of their own lengths (SelfAttention::forward_sequences).
    Tensor forward_sequences(const Tensor& x, const std::vector<KeyValue*>& caches,
                             const std::vector<std::size_t>& offsets) const;
    std::string type_name() const override { return "TransformerLayer"; }

    const std::shared_ptr<LayerNorm>& norm1() const { return norm1_; }
    const std::shared_ptr<SelfAttention>& attn() const { return attn_; }
    const std::shared_ptr<LayerNorm>& norm2() const { return norm2_; }
    const std::shared_ptr<FFN>& ffn() const { return ffn_; }
    bool no_res() const { return no_res_; }

private:
    std::shared_ptr<LayerNorm> norm1_;
    std::shared_ptr<SelfAttention> attn_;
    std::shared_ptr<LayerNorm> norm2_;
    std::shared_ptr<FFN> ffn_;
    bool no_res_;
};

}  // namespace ct::nn::gpt
