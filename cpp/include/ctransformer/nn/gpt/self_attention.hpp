// SelfAttention(embed_dim, num_head, dropout, scale): the GPT's causal multi-head self-attention.
//
// q, k, v = q_layer(x), k_layer(x), v_layer(x), split into heads (b, h, t, d), d = embed_dim / h;
// attn = attn_drop(softmax(masked_fill(q @ k^T * scale, causal, -inf)));
// scale is the seed's 1 / sqrt(d) unless given (GPT-2's scale_attn_weights false: 1; its
// scale_attn_by_inverse_layer_idx: divided by layer l + 1 too; gpt/options.hpp).
// out = proj_drop(proj_layer(concat_heads(attn @ v))). Returns (out, attn).
//
// Cached decoding runs the same forward with a KeyValue cache: x's keys/values join those of the
// earlier positions it holds, and x's queries attend over all of them.
#pragma once
#include <memory>
#include <optional>
#include <utility>

#include "ctransformer/nn/dropout.hpp"
#include "ctransformer/nn/kv_cache.hpp"
#include "ctransformer/nn/linear.hpp"
#include "ctransformer/nn/module.hpp"

namespace ct::nn::gpt {

class SelfAttention : public Module {
public:
    SelfAttention(std::size_t embed_dim, std::size_t num_head, float dropout, std::optional<float> scale = {});

    // x (b, t, embed_dim) -> (out (b, t, embed_dim), attn (b, num_head, t, T)), T = t. With a cache
    // (rows b), x holds the t positions after the cache->length held: their keys/values are appended,
    // and query i, at position T - t + i of the T = cache->length positions now held, attends over
    // positions 0 .. T - t + i (causal).
    std::pair<Tensor, Tensor> forward(const Tensor& x, KeyValue* cache = nullptr) const;

    // One position for sequences of their own lengths (a continuous batch): x (rows, 1, embed_dim), sequence s
    // owning rows [offsets[s], offsets[s + 1]) and caches[s]; each sequence's keys/values are appended to its own
    // cache and its rows attend over it (ops/attention.hpp: attend_cached). No weights returned, no graph.
    Tensor forward_sequences(const Tensor& x, const std::vector<KeyValue*>& caches,
                             const std::vector<std::size_t>& offsets) const;
    std::string type_name() const override { return "SelfAttention"; }

    std::shared_ptr<Linear> q_layer, k_layer, v_layer, proj_layer;
    std::shared_ptr<Dropout> attn_drop, proj_drop;
    const std::size_t embed_dim, num_head, head_dim;
    const float scale;   // the scores' factor

private:
    void check_input(const Tensor& x) const;
    // The rest after the key/value projections, over positions [0, kv_length) of keys and values.
    std::pair<Tensor, Tensor> attend(const Tensor& x, const Tensor& keys, const Tensor& values,
                                     std::size_t kv_length) const;
};

}  // namespace ct::nn::gpt
