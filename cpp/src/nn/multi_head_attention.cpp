#include "ctransformer/nn/multi_head_attention.hpp"

#include <cmath>

#include "ctransformer/error.hpp"
#include "ctransformer/ops/attention.hpp"
#include "ctransformer/ops/elementwise.hpp"
#include "ctransformer/ops/shape.hpp"

namespace ct::nn {

MultiHeadAttention::MultiHeadAttention(std::size_t n, std::size_t dm, std::size_t dk, std::size_t dv, float p,
                                       const SublayerOptions& o)
    : n_head(n), d_model(dm), d_k(dk), d_v(dv), options(o) {
    if (n == 0 || dm == 0 || dk == 0 || dv == 0)
        throw ValueError("MultiHeadAttention: n_head, d_model, d_k and d_v must be positive");
    w_qs = std::make_shared<Linear>(dm, n * dk, o.qkv_bias);
    w_ks = std::make_shared<Linear>(dm, n * dk, o.qkv_bias);
    w_vs = std::make_shared<Linear>(dm, n * dv, o.qkv_bias);
    fc = std::make_shared<Linear>(n * dv, dm, o.proj_bias);
    // temperature = d_k ** 0.5 (the post-norm reference) = 8 ** 0.5 for the small pre-norm model's heads of 8.
    attention = std::make_shared<ScaledDotProductAttention>(float(std::sqrt(double(dk))), o.attn_dropout, o.mask_fill,
                                                            o.scale_after_matmul);
    dropout = std::make_shared<Dropout>(p);
    layer_norm = std::make_shared<LayerNorm>(dm, o.layer_norm_eps);
    if (o.layout == Layout::PostNorm) {   // SubLayers.py's registration order
        register_module("w_qs", w_qs);
        register_module("w_ks", w_ks);
        register_module("w_vs", w_vs);
        register_module("fc", fc);
        register_module("attention", attention);
        register_module("dropout", dropout);
        register_module("layer_norm", layer_norm);
    } else if (o.layout == Layout::Marian) {   // MarianAttention: k, v, q, out; the layer holds the LayerNorm
        register_module("k_proj", w_ks);
        register_module("v_proj", w_vs);
        register_module("q_proj", w_qs);
        register_module("out_proj", fc);
        register_module("attention", attention);   // parameter-free
        register_module("dropout", dropout);
    } else {                              // the pre-norm model's MultiHead
        register_module("fc_Q", w_qs);
        register_module("fc_K", w_ks);
        register_module("fc_V", w_vs);
        register_module("out_fc", fc);
        register_module("norm", layer_norm);
        register_module("DropOut", dropout);
        register_module("attention", attention);   // a plain function in the seed; no parameters
    }
}

void MultiHeadAttention::check_input(const Tensor& t, const char* fn, const char* name) const {
    if (t.dim() != 3 || t.size(2) != d_model)
        throw ValueError(std::string(fn) + ": " + name + " must be (batch, length, d_model = " + std::to_string(d_model) +
                         "), got " + shape_str(t.shape()));
}

std::pair<Tensor, Tensor> MultiHeadAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                                      const Mask* mask, KeyValue* cache) const {
    const char* fn = "MultiHeadAttention.forward";
    check_input(q, fn, "q");
    check_input(k, fn, "k");
    check_input(v, fn, "v");
    const std::size_t sz_b = q.size(0), len_k = k.size(1), len_v = v.size(1);
    if (k.size(0) != sz_b || v.size(0) != sz_b)
        throw ValueError(std::string(fn) + ": q, k and v must share the batch size, got " + shape_str(q.shape()) + ", " +
                         shape_str(k.shape()) + ", " + shape_str(v.shape()));
    if (len_k != len_v)
        throw ValueError(std::string(fn) + ": k and v must have the same length, got " + std::to_string(len_k) + " and " +
                         std::to_string(len_v));
    Tensor qn = q, kn = k, vn = v;
    if (options.norm_first) {   // pre-norm: one LayerNorm on each of Q, K and V (computed once per distinct input)
        qn = layer_norm->forward(q);
        kn = k.same_as(q) ? qn : layer_norm->forward(k);
        vn = v.same_as(q) ? qn : v.same_as(k) ? kn : layer_norm->forward(v);
    }
    const Tensor keys = w_ks->forward(kn), values = w_vs->forward(vn);
    if (!cache) return attend(q, qn, keys, values, mask, 0);
    // Cached: these positions join the earlier ones, and the queries read all of them in place.
    append_positions(*cache, keys, values);
    return attend(q, qn, cache->k, cache->v, mask, cache->length, cache->row_map.empty() ? nullptr : &cache->row_map);
}

KeyValue MultiHeadAttention::project_kv(const Tensor& kv_input) const {
    check_input(kv_input, "MultiHeadAttention.project_kv", "kv_input");
    const Tensor x = options.norm_first ? layer_norm->forward(kv_input) : kv_input;
    return {w_ks->forward(x), w_vs->forward(x), kv_input.size(1), {}};
}

std::pair<Tensor, Tensor> MultiHeadAttention::attend(const Tensor& q, const KeyValue& kv, const Mask* mask) const {
    const char* fn = "MultiHeadAttention.attend";
    check_input(q, fn, "q");
    const std::size_t b = q.size(0);
    if (kv.empty() || kv.k.dim() != 3 || kv.v.dim() != 3 || kv.rows() != b || kv.v.size(0) != kv.k.size(0) ||
        kv.k.size(2) != n_head * d_k || kv.v.size(2) != n_head * d_v || kv.k.size(1) != kv.v.size(1) ||
        kv.length > kv.k.size(1))
        throw ValueError(std::string(fn) + ": keys/values must be (batch = " + std::to_string(b) + " or a row map of it" +
                         ", capacity >= length, n_head * d_k / d_v = " + std::to_string(n_head * d_k) + " / " +
                         std::to_string(n_head * d_v) + ") with length >= 1, got " + shape_str(kv.k.shape()) + " and " +
                         shape_str(kv.v.shape()) + ", length " + std::to_string(kv.length));
    // Each row map entry is checked against k's rows by multi_head_attention (ops/attention.hpp).
    return attend(q, options.norm_first ? layer_norm->forward(q) : q, kv.k, kv.v, mask, kv.length,
                  kv.row_map.empty() ? nullptr : &kv.row_map);
}

Tensor MultiHeadAttention::forward_sequences(const Tensor& q, const std::vector<KeyValue*>& caches,
                                            const std::vector<std::size_t>& offsets, bool append) const {
    const char* fn = "MultiHeadAttention.forward_sequences";
    check_input(q, fn, "q");
    if (q.size(1) != 1 || offsets.size() != caches.size() + 1 || offsets.front() != 0 || offsets.back() != q.size(0))
        throw ValueError(std::string(fn) + ": q must be (rows, 1, d_model) and offsets one more than the caches, from 0 "
                         "to the rows, got q " + shape_str(q.shape()) + " and " + std::to_string(offsets.size()) +
                         " offsets for " + std::to_string(caches.size()) + " caches");
    const Tensor q_in = options.norm_first ? layer_norm->forward(q) : q;
    if (append) {   // the keys/values of every row in one product each, then each sequence takes its rows
        const Tensor keys = w_ks->forward(q_in), values = w_vs->forward(q_in);
        for (std::size_t s = 0; s < caches.size(); ++s)
            append_positions(*caches[s], keys, values, offsets[s], offsets[s + 1] - offsets[s]);
    }
    std::vector<CachedSequence> sequences(caches.size());
    for (std::size_t s = 0; s < caches.size(); ++s) {
        const KeyValue& kv = *caches[s];
        if (kv.rows() != offsets[s + 1] - offsets[s])
            throw ValueError(std::string(fn) + ": sequence " + std::to_string(s) + " owns " +
                             std::to_string(offsets[s + 1] - offsets[s]) + " rows and its cache " + std::to_string(kv.rows()));
        sequences[s] = {&kv.k, &kv.v, kv.length, kv.row_map.empty() ? nullptr : &kv.row_map, offsets[s], offsets[s + 1]};
    }
    const Tensor heads = attend_cached(w_qs->forward(q_in), sequences, n_head, 1.0f / attention->temperature);
    Tensor out = add(dropout->forward(fc->forward(heads)), q);   // the residual is the un-normalised query
    if (!options.norm_first) out = layer_norm->forward(out);
    return out;
}

std::pair<Tensor, Tensor> MultiHeadAttention::attend(const Tensor& q, const Tensor& q_in, const Tensor& keys,
                                                     const Tensor& values, const Mask* mask, std::size_t kv_length,
                                                     const std::vector<std::size_t>* kv_rows) const {
    const std::size_t sz_b = q.size(0), len_q = q.size(1), len_k = kv_length ? kv_length : keys.size(1);
    Mask head_mask;
    if (mask) {
        const Shape& s = mask->shape;
        if (s.size() != 3 || (s[0] != 1 && s[0] != sz_b) || (s[1] != 1 && s[1] != len_q) || s[2] != len_k)
            throw ValueError("MultiHeadAttention.attend: mask must be (batch or 1, len_q or 1, len_k) = (" +
                             std::to_string(sz_b) + ", " + std::to_string(len_q) + ", " + std::to_string(len_k) +
                             "), got " + shape_str(s));
        head_mask = *mask;
        head_mask.shape = {s[0], 1, s[1], s[2]};   // mask.unsqueeze(1): broadcast over the heads
    }
    // The seed splits the heads (b x len x (n*d) -> b x n x len x d), runs its ScaledDotProductAttention
    // and concatenates them back; the fused op does the same maths on the projections' layout
    // directly, with no split or concat copies (ops/attention.hpp). Scores are scaled by
    // 1/temperature inside the product (alpha), for both of the seeds' scaling orders.
    AttentionConfig c;
    c.n_head = n_head;
    c.scale = 1.0f / attention->temperature;
    c.mask = mask ? &head_mask : nullptr;
    c.fill_value = attention->mask_fill;
    c.dropout_p = attention->dropout->p;
    c.training = attention->dropout->is_training();
    c.kv_length = kv_length;
    c.kv_rows = kv_rows;
    auto [heads, attn] = multi_head_attention(w_qs->forward(q_in), keys, values, c);
    Tensor out = add(dropout->forward(fc->forward(heads)), q);   // the residual is the un-normalised query
    if (!options.norm_first) out = layer_norm->forward(out);
    return {out, attn};
}

}  // namespace ct::nn
