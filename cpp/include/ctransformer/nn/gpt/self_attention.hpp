// SelfAttention(embed_dim, num_head, dropout): seed 004's causal multi-head self-attention.
//
// q, k, v = q_layer(x), k_layer(x), v_layer(x), split into heads (b, h, t, d), d = embed_dim / h;
// attn = attn_drop(softmax(masked_fill(q @ k^T / sqrt(d), causal, -inf)));
// out = proj_drop(proj_layer(concat_heads(attn @ v))). Returns (out, attn).
//
// attend() takes the keys/values as arguments, so a key/value cache can hold those of earlier
// positions and feed them back.
#pragma once
#include <memory>
#include <utility>

#include "ctransformer/nn/dropout.hpp"
#include "ctransformer/nn/linear.hpp"
#include "ctransformer/nn/module.hpp"

namespace ct::nn::gpt {

class SelfAttention : public Module {
public:
    SelfAttention(std::size_t embed_dim, std::size_t num_head, float dropout);

    // x (b, t, embed_dim) -> (out (b, t, embed_dim), attn (b, num_head, t, t)).
    std::pair<Tensor, Tensor> forward(const Tensor& x) const;

    // forward() with the keys/values given: the queries of x (b, s, embed_dim) attend over positions
    // [0, kv_length) (0: all) of keys and values (b, capacity, embed_dim), k_layer / v_layer of the
    // inputs so far; query i sits at position kv_length - s + i (causal). forward(x) is
    // attend(x, k_layer(x), v_layer(x)); a key/value cache passes its own (decode/gpt_incremental.hpp).
    std::pair<Tensor, Tensor> attend(const Tensor& x, const Tensor& keys, const Tensor& values,
                                     std::size_t kv_length = 0) const;

    std::string type_name() const override { return "SelfAttention"; }

    std::shared_ptr<Linear> q_layer, k_layer, v_layer, proj_layer;
    std::shared_ptr<Dropout> attn_drop, proj_drop;
    const std::size_t embed_dim, num_head, head_dim;

private:
    void check_input(const Tensor& x) const;
};

}  // namespace ct::nn::gpt
