// SelfAttention(embed_dim, num_head, dropout): seed 004's causal multi-head self-attention.
//
// q, k, v = q_layer(x), k_layer(x), v_layer(x), split into heads (b, h, t, d), d = embed_dim / h;
// attn = attn_drop(softmax(masked_fill(q @ k^T / sqrt(d), causal, -inf)));
// out = proj_drop(proj_layer(concat_heads(attn @ v))). Returns (out, attn).
//
// The three steps are public so that a key/value cache can slot in between them: keys and
// values of earlier positions are appended along dimension 2 of the split heads before attend(),
// whose causal mask already lets the Lq queries sit at the last Lq of Lk key positions.
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

    struct Heads {
        Tensor q, k, v;  // each (b, num_head, t, head_dim)
    };
    Heads project(const Tensor& x) const;
    // Causal attention of q (b, h, Lq, d) over k, v (b, h, Lk, d), Lk >= Lq: query i (at absolute
    // position Lk - Lq + i) sees keys 0 .. Lk - Lq + i. Returns (attn @ v, attn).
    std::pair<Tensor, Tensor> attend(const Tensor& q, const Tensor& k, const Tensor& v) const;
    // (b, h, t, d) -> (b, t, h * d) -> proj_layer -> proj_drop.
    Tensor merge(const Tensor& heads) const;

    std::string type_name() const override { return "SelfAttention"; }

    std::shared_ptr<Linear> q_layer, k_layer, v_layer, proj_layer;
    std::shared_ptr<Dropout> attn_drop, proj_drop;
    const std::size_t embed_dim, num_head, head_dim;
};

}  // namespace ct::nn::gpt
