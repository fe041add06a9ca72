#include "ctransformer/nn/gpt/self_attention.hpp"

#include <cmath>
#include <limits>

#include "ctransformer/error.hpp"
#include "ctransformer/ops/attention.hpp"

namespace ct::nn::gpt {

namespace {

std::size_t checked_head_dim(std::size_t embed_dim, std::size_t num_head) {
    if (num_head == 0 || embed_dim % num_head != 0)
        throw ValueError("SelfAttention: embed_dim (" + std::to_string(embed_dim) +
                         ") must be a positive multiple of num_head (" + std::to_string(num_head) + ")");
    return embed_dim / num_head;
}

}  // namespace

SelfAttention::SelfAttention(std::size_t e, std::size_t h, float dropout, std::optional<float> given_scale)
    : embed_dim(e), num_head(h), head_dim(checked_head_dim(e, h)),
      scale(given_scale ? *given_scale : 1.0f / std::sqrt(float(head_dim))) {
    if (!std::isfinite(scale) || !(scale > 0.0f))
        throw ValueError("SelfAttention: scale must be a positive finite number, got " + std::to_string(scale));
    // Registration order is the seed's __init__ order, hence torch's state_dict order.
    q_layer = register_module("q_layer", std::make_shared<Linear>(e, e));
    k_layer = register_module("k_layer", std::make_shared<Linear>(e, e));
    v_layer = register_module("v_layer", std::make_shared<Linear>(e, e));
    proj_layer = register_module("proj_layer", std::make_shared<Linear>(e, e));
    attn_drop = register_module("attn_drop", std::make_shared<Dropout>(dropout));
    proj_drop = register_module("proj_drop", std::make_shared<Dropout>(dropout));
}

std::pair<Tensor, Tensor> SelfAttention::forward(const Tensor& x, KeyValue* cache) const {
    check_input(x);
    const Tensor keys = k_layer->forward(x), values = v_layer->forward(x);
    if (!cache) return attend(x, keys, values, 0);
    // Cached: these positions join the earlier ones, and the queries read all of them in place.
    if (!cache->row_map.empty())   // (GPT's decoding never selects rows)
        throw ValueError("SelfAttention.forward: a cache with a row map is not supported here");
    append_positions(*cache, keys, values);
    return attend(x, cache->k, cache->v, cache->length);
}

Tensor SelfAttention::forward_sequences(const Tensor& x, const std::vector<KeyValue*>& caches,
                                       const std::vector<std::size_t>& offsets) const {
    check_input(x);
    if (x.size(1) != 1 || offsets.size() != caches.size() + 1 || offsets.front() != 0 || offsets.back() != x.size(0))
        throw ValueError("SelfAttention.forward_sequences: x must be (rows, 1, embed_dim) and offsets one more than the "
                         "caches, from 0 to the rows");
    const Tensor keys = k_layer->forward(x), values = v_layer->forward(x);
    std::vector<CachedSequence> sequences(caches.size());
    for (std::size_t s = 0; s < caches.size(); ++s) {
        KeyValue& kv = *caches[s];
        append_positions(kv, keys, values, offsets[s], offsets[s + 1] - offsets[s]);
        sequences[s] = {&kv.k, &kv.v, kv.length, kv.row_map.empty() ? nullptr : &kv.row_map, offsets[s], offsets[s + 1]};
    }
    // One query at the last position held: the causal mask hides nothing from it.
    const Tensor heads = attend_cached(q_layer->forward(x), sequences, num_head, scale);
    return proj_drop->forward(proj_layer->forward(heads));
}

std::pair<Tensor, Tensor> SelfAttention::attend(const Tensor& x, const Tensor& keys, const Tensor& values,
                                                std::size_t kv_length) const {
    // The seed's split into heads, causal attention and concatenation, fused: the heads stay
    // interleaved in the projections' (b, t, h d) layout and the attention reads and writes them in
    // place (no split or merge copies). With more keys than queries the causal mask puts the queries
    // at the last positions (a decoding cache's new tokens).
    AttentionConfig c;
    c.n_head = num_head;
    c.scale = scale;
    c.causal = true;
    c.fill_value = -std::numeric_limits<float>::infinity();
    c.dropout_p = attn_drop->p;
    c.training = attn_drop->is_training();
    c.kv_length = kv_length;
    auto [out, attn] = multi_head_attention(q_layer->forward(x), keys, values, c);
    return {proj_drop->forward(proj_layer->forward(out)), attn};
}

void SelfAttention::check_input(const Tensor& x) const {
    if (x.dim() != 3 || x.size(2) != embed_dim)
        throw ValueError("SelfAttention: input must have shape (batch, seq_len, embed_dim = " +
                         std::to_string(embed_dim) + "), got " + shape_str(x.shape()));
}

}  // namespace ct::nn::gpt
