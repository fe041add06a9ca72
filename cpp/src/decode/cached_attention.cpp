#include "ctransformer/decode/cached_attention.hpp"

#include "ctransformer/error.hpp"
#include "ctransformer/ops/elementwise.hpp"
#include "ctransformer/ops/shape.hpp"

namespace ct::decode {

namespace {

void check_input(const nn::MultiHeadAttention& mha, const Tensor& t, const char* fn, const char* name) {
    if (t.dim() != 3 || t.size(2) != mha.d_model)
        throw ValueError(std::string(fn) + ": " + name + " must be (batch, length, d_model = " +
                         std::to_string(mha.d_model) + "), got " + shape_str(t.shape()));
}

// b x len x (n*d) -> b x len x n x d -> b x n x len x d
Tensor split_heads(const Tensor& x, std::size_t n_head, std::size_t d) {
    return transpose(reshape(x, {std::int64_t(x.size(0)), std::int64_t(x.size(1)), std::int64_t(n_head),
                                 std::int64_t(d)}), 1, 2);
}

}  // namespace

KeyValue project_kv(const nn::MultiHeadAttention& mha, const Tensor& kv_input) {
    check_input(mha, kv_input, "project_kv", "kv_input");
    const Tensor x = mha.options.norm_first ? mha.layer_norm->forward(kv_input) : kv_input;
    return {split_heads(mha.w_ks->forward(x), mha.n_head, mha.d_k), split_heads(mha.w_vs->forward(x), mha.n_head, mha.d_v)};
}

std::pair<Tensor, Tensor> attend_projected(const nn::MultiHeadAttention& mha, const Tensor& q, const KeyValue& kv,
                                           const Mask* mask) {
    const char* fn = "attend_projected";
    check_input(mha, q, fn, "q");
    const std::size_t b = q.size(0), len_q = q.size(1);
    if (kv.empty() || kv.k.size(0) != b || kv.v.size(0) != b || kv.k.size(1) != mha.n_head ||
        kv.v.size(1) != mha.n_head || kv.k.size(3) != mha.d_k || kv.v.size(3) != mha.d_v ||
        kv.k.size(2) != kv.v.size(2))
        throw ValueError(std::string(fn) + ": keys/values must be (batch = " + std::to_string(b) + ", n_head = " +
                         std::to_string(mha.n_head) + ", len, d_k / d_v), got " + shape_str(kv.k.shape()) + " and " +
                         shape_str(kv.v.shape()));
    const std::size_t len_k = kv.k.size(2);
    Mask head_mask;
    if (mask) {
        const Shape& s = mask->shape;
        if (s.size() != 3 || (s[0] != 1 && s[0] != b) || (s[1] != 1 && s[1] != len_q) || s[2] != len_k)
            throw ValueError(std::string(fn) + ": mask must be (batch or 1, len_q or 1, len_k) = (" + std::to_string(b) +
                             ", " + std::to_string(len_q) + ", " + std::to_string(len_k) + "), got " + shape_str(s));
        head_mask = *mask;
        head_mask.shape = {s[0], 1, s[1], s[2]};   // broadcast over the heads
    }
    const Tensor qn = mha.options.norm_first ? mha.layer_norm->forward(q) : q;
    const Tensor qh = split_heads(mha.w_qs->forward(qn), mha.n_head, mha.d_k);
    auto [heads, attn] = mha.attention->forward(qh, kv.k, kv.v, mask ? &head_mask : nullptr);
    // b x n x lq x dv -> b x lq x n x dv -> b x lq x (n*dv)
    Tensor out = reshape(transpose(heads, 1, 2), {std::int64_t(b), std::int64_t(len_q), -1});
    out = add(mha.dropout->forward(mha.fc->forward(out)), q);   // the residual is the un-normalised query
    if (!mha.options.norm_first) out = mha.layer_norm->forward(out);
    return {out, attn};
}

}  // namespace ct::decode
