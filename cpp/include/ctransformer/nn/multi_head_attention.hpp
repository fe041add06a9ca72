// MultiHeadAttention(n_head, d_model, d_k, d_v, dropout) (jadore801120's SubLayers.py), and the pre-norm model's
// MultiHead through SublayerOptions:
//   post-norm: LN(q + dropout(fc(concat_h attention(w_qs q, w_ks k, w_vs v))))
//   pre-norm:  q + dropout(fc(concat_h attention(w_qs LN(q), w_ks LN(k), w_vs LN(v))))
// q, k and v are separate inputs (self-attention passes one tensor three times). Cached decoding
// runs the same code: forward() with a KeyValue cache appends k's and v's keys/values to the
// positions held and attends over all of them (the self-attention); attend() reads keys/values
// projected once by project_kv() (the cross-attention over an encoder output).
#pragma once
#include <memory>
#include <utility>

#include "ctransformer/nn/dropout.hpp"
#include "ctransformer/nn/kv_cache.hpp"
#include "ctransformer/nn/layer_norm.hpp"
#include "ctransformer/nn/linear.hpp"
#include "ctransformer/nn/scaled_dot_product_attention.hpp"
#include "ctransformer/nn/transformer_config.hpp"

namespace ct::nn {

class MultiHeadAttention : public Module {
public:
    MultiHeadAttention(std::size_t n_head, std::size_t d_model, std::size_t d_k, std::size_t d_v,
                       float dropout = 0.1f, const SublayerOptions& options = {});
    // q (b, Lq, d_model), k and v (b, Lk, d_model); mask (b or 1, Lq or 1, Lk), nonzero = may attend,
    // broadcast over the heads. Returns (output (b, Lq, d_model), attn (b, n_head, Lq, Lk)).
    // With a cache (rows b): the keys/values of k and v are appended to the positions it holds, and
    // the queries attend over all of them, Lk = cache->length (the mask's too).
    std::pair<Tensor, Tensor> forward(const Tensor& q, const Tensor& k, const Tensor& v, const Mask* mask = nullptr,
                                      KeyValue* cache = nullptr) const;
    // The keys and values of kv_input (b, L, d_model), (b, L, n_head * d_k / d_v), length L: w_ks / w_vs
    // of LN(kv_input) pre-norm (the pre-norm model's one LayerNorm on Q, K and V), of kv_input post-norm.
    KeyValue project_kv(const Tensor& kv_input) const;
    // forward() over keys/values projected before (project_kv, then maybe rows selected or mapped): the
    // queries q (b, Lq, d_model) attend over kv's kv.length positions, read in place (query row i reads
    // row kv.row_map[i] when kv has a row map); the mask's Lk is kv.length.
    // forward(q, k, k, mask) == attend(q, project_kv(k), mask).
    std::pair<Tensor, Tensor> attend(const Tensor& q, const KeyValue& kv, const Mask* mask = nullptr) const;
    // One decoding position for sequences of their own lengths (a continuous batch): q (rows, 1, d_model),
    // sequence s owning rows [offsets[s], offsets[s + 1]) and the cache caches[s]. With append (the
    // self-attention), each sequence's rows' keys/values are appended to its cache first; without (the
    // cross-attention), the cache holds its source's. The projections run once over every row; each row's
    // attention reads its own sequence's positions (ops/attention.hpp: attend_cached). No mask, no weights
    // returned, no graph. Returns the output (rows, 1, d_model).
    Tensor forward_sequences(const Tensor& q, const std::vector<KeyValue*>& caches,
                             const std::vector<std::size_t>& offsets, bool append) const;
    std::string type_name() const override { return "MultiHeadAttention"; }

    const std::size_t n_head, d_model, d_k, d_v;
    const SublayerOptions options;
    // Post-norm names: w_qs, w_ks, w_vs, fc, attention, dropout, layer_norm.
    // Pre-norm names: fc_Q, fc_K, fc_V, out_fc, norm, DropOut (and attention, parameter-free).
    // Marian names: k_proj, v_proj, q_proj, out_proj; the layer names layer_norm (self_attn_layer_norm, ...).
    std::shared_ptr<Linear> w_qs, w_ks, w_vs, fc;
    std::shared_ptr<ScaledDotProductAttention> attention;
    std::shared_ptr<Dropout> dropout;
    std::shared_ptr<LayerNorm> layer_norm;

private:
    void check_input(const Tensor& t, const char* fn, const char* name) const;
    // The rest after the key/value projections: q_in is what w_qs reads (LN(q) pre-norm, else q);
    // positions [0, kv_length) of keys and values are attended (0: all of them); kv_rows: a row map
    // (KeyValue::row_map), or null.
    std::pair<Tensor, Tensor> attend(const Tensor& q, const Tensor& q_in, const Tensor& keys, const Tensor& values,
                                     const Mask* mask, std::size_t kv_length,
                                     const std::vector<std::size_t>* kv_rows = nullptr) const;
};

}  // namespace ct::nn
