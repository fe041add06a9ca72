#include "ctransformer/decode/cached_attention.hpp"

#include "ctransformer/error.hpp"

namespace ct::decode {

namespace {

void check_input(const nn::MultiHeadAttention& mha, const Tensor& t, const char* fn, const char* name) {
    if (t.dim() != 3 || t.size(2) != mha.d_model)
        throw ValueError(std::string(fn) + ": " + name + " must be (batch, length, d_model = " +
                         std::to_string(mha.d_model) + "), got " + shape_str(t.shape()));
}

}  // namespace

KeyValue project_kv(const nn::MultiHeadAttention& mha, const Tensor& kv_input) {
    check_input(mha, kv_input, "project_kv", "kv_input");
    const Tensor x = mha.options.norm_first ? mha.layer_norm->forward(kv_input) : kv_input;
    return {mha.w_ks->forward(x), mha.w_vs->forward(x), kv_input.size(1)};
}

std::pair<Tensor, Tensor> attend_projected(const nn::MultiHeadAttention& mha, const Tensor& q, const KeyValue& kv,
                                           const Mask* mask) {
    const char* fn = "attend_projected";
    check_input(mha, q, fn, "q");
    const std::size_t b = q.size(0);
    if (kv.empty() || kv.k.dim() != 3 || kv.v.dim() != 3 || kv.k.size(0) != b || kv.v.size(0) != b ||
        kv.k.size(2) != mha.n_head * mha.d_k || kv.v.size(2) != mha.n_head * mha.d_v || kv.k.size(1) != kv.v.size(1) ||
        kv.length > kv.k.size(1))
        throw ValueError(std::string(fn) + ": keys/values must be (batch = " + std::to_string(b) +
                         ", capacity >= length, n_head * d_k / d_v = " + std::to_string(mha.n_head * mha.d_k) + " / " +
                         std::to_string(mha.n_head * mha.d_v) + ") with length >= 1, got " + shape_str(kv.k.shape()) +
                         " and " + shape_str(kv.v.shape()) + ", length " + std::to_string(kv.length));
    const Tensor q_in = mha.options.norm_first ? mha.layer_norm->forward(q) : q;
    return mha.attend(q, q_in, kv.k, kv.v, mask, kv.length);   // reads the cache in place
}

}  // namespace ct::decode
