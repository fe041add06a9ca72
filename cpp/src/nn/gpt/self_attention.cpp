#include "ctransformer/nn/gpt/self_attention.hpp"

#include <cmath>
#include <limits>

#include "ctransformer/error.hpp"
#include "ctransformer/ops/attention.hpp"
#include "ctransformer/ops/elementwise.hpp"
#include "ctransformer/ops/masked_fill.hpp"
#include "ctransformer/ops/matmul.hpp"
#include "ctransformer/ops/shape.hpp"
#include "ctransformer/ops/softmax.hpp"

namespace ct::nn::gpt {

namespace {

std::size_t checked_head_dim(std::size_t embed_dim, std::size_t num_head) {
    if (num_head == 0 || embed_dim % num_head != 0)
        throw ValueError("SelfAttention: embed_dim (" + std::to_string(embed_dim) +
                         ") must be a positive multiple of num_head (" + std::to_string(num_head) + ")");
    return embed_dim / num_head;
}

}  // namespace

SelfAttention::SelfAttention(std::size_t e, std::size_t h, float dropout)
    : embed_dim(e), num_head(h), head_dim(checked_head_dim(e, h)) {
    // Registration order is the seed's __init__ order, hence torch's state_dict order.
    q_layer = register_module("q_layer", std::make_shared<Linear>(e, e));
    k_layer = register_module("k_layer", std::make_shared<Linear>(e, e));
    v_layer = register_module("v_layer", std::make_shared<Linear>(e, e));
    proj_layer = register_module("proj_layer", std::make_shared<Linear>(e, e));
    attn_drop = register_module("attn_drop", std::make_shared<Dropout>(dropout));
    proj_drop = register_module("proj_drop", std::make_shared<Dropout>(dropout));
}

SelfAttention::Heads SelfAttention::project(const Tensor& x) const {
    if (x.dim() != 3 || x.size(2) != embed_dim)
        throw ValueError("SelfAttention: input must have shape (batch, seq_len, embed_dim = " +
                         std::to_string(embed_dim) + "), got " + shape_str(x.shape()));
    const auto b = std::int64_t(x.size(0)), t = std::int64_t(x.size(1));
    // (b, t, h * d) -> (b, t, h, d) -> (b, h, t, d)
    auto split = [&](const Tensor& y) {
        return transpose(reshape(y, {b, t, std::int64_t(num_head), std::int64_t(head_dim)}), 1, 2);
    };
    return {split(q_layer->forward(x)), split(k_layer->forward(x)), split(v_layer->forward(x))};
}

std::pair<Tensor, Tensor> SelfAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v) const {
    const std::size_t lq = q.size(2), lk = k.size(2);
    if (lk < lq)
        throw ValueError("SelfAttention.attend: keys (" + std::to_string(lk) + ") must be at least as many as queries (" +
                         std::to_string(lq) + ")");
    // Scores as the seed: (q @ k^T) / sqrt(head_dim).
    Tensor scores = div_scalar(matmul(q, k, false, true), std::sqrt(float(head_dim)));  // (b, h, Lq, Lk)
    // Causal mask, true where filled: key j is in query i's future when j > i + (Lk - Lq).
    Mask future{std::vector<std::uint8_t>(lq * lk, 0), {lq, lk}};
    const std::size_t offset = lk - lq;
    for (std::size_t i = 0; i < lq; ++i)
        for (std::size_t j = i + offset + 1; j < lk; ++j) future.data[i * lk + j] = 1;
    scores = masked_fill(scores, future, -std::numeric_limits<float>::infinity());
    Tensor attn = attn_drop->forward(softmax(scores, -1));
    return {matmul(attn, v), attn};
}

Tensor SelfAttention::merge(const Tensor& heads) const {
    const auto b = std::int64_t(heads.size(0)), t = std::int64_t(heads.size(2));
    Tensor out = reshape(transpose(heads, 1, 2), {b, t, std::int64_t(embed_dim)});
    return proj_drop->forward(proj_layer->forward(out));
}

std::pair<Tensor, Tensor> SelfAttention::forward(const Tensor& x) const {
    if (x.dim() != 3 || x.size(2) != embed_dim)
        throw ValueError("SelfAttention: input must have shape (batch, seq_len, embed_dim = " +
                         std::to_string(embed_dim) + "), got " + shape_str(x.shape()));
    // project / attend / merge fused: the heads stay interleaved in the projections' (b, t, h d)
    // layout and the attention reads and writes them in place (no split or merge copies).
    AttentionConfig c;
    c.n_head = num_head;
    c.scale = 1.0f / std::sqrt(float(head_dim));
    c.causal = true;
    c.fill_value = -std::numeric_limits<float>::infinity();
    c.dropout_p = attn_drop->p;
    c.training = attn_drop->is_training();
    auto [out, attn] = multi_head_attention(q_layer->forward(x), k_layer->forward(x), v_layer->forward(x), c);
    return {proj_drop->forward(proj_layer->forward(out)), attn};
}

}  // namespace ct::nn::gpt
