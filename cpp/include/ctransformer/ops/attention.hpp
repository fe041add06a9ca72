// Scaled dot-product attention (the post-norm Transformer's): attn = dropout(softmax(q / sqrt(d_k) @ k^T,
// masked)), out = attn @ v. `mask` is nonzero where a query may attend to a key (the references' mask == 0
// is filled with fill_value, -1e9 in the post-norm Transformer, -inf in the pre-norm model and the GPT) and
// broadcasts to the scores' shape (..., Lq, Lk). Returns (out, attn); both are differentiable.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include "ctransformer/runtime/tensor.hpp"

namespace ct {

std::pair<Tensor, Tensor> scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                                       const Mask* mask = nullptr, float dropout_p = 0.0f,
                                                       float fill_value = -1e9f, bool training = true);

// Multi-head attention straight from the projections' layout, with no split or merge copies:
// q (b, Lq, n_head * d_k), k (b, Lk, n_head * d_k), v (b, Lk, n_head * d_v), head h in columns
// [h d, (h + 1) d). For each batch entry and head (in parallel, one BLAS product each, the heads
// addressed through the leading dimension):
//   attn = dropout(softmax(fill(scale * q_h @ k_h^T)))        -> (b, n_head, Lq, Lk)
//   out[:, :, h d_v : (h + 1) d_v] = attn @ v_h                -> (b, Lq, n_head * d_v)
// where fill sets the score to fill_value where the mask is 0 (or, with causal, where key j is
// in query i's future: j > i + Lk - Lq). Two graph nodes (weights, then weighted sum), each with
// a hand-written backward; the weights returned are differentiable like any other output.
struct AttentionConfig {
    std::size_t n_head = 1;
    float scale = 1.0f;           // 1/sqrt(d_k): 1/temperature
    const Mask* mask = nullptr;   // nonzero = may attend; broadcasts to (b, n_head, Lq, Lk)
    float fill_value = -1e9f;
    bool causal = false;
    float dropout_p = 0.0f;       // on the attention weights, when training
    bool training = false;
    // Keys/values held in a cache with room to grow (nn/kv_cache.hpp): only positions
    // [0, kv_length) of k and v are read (Lk = kv_length); 0 reads all k.size(1) of them.
    std::size_t kv_length = 0;
    // Batch entry i of q reads entry (*kv_rows)[i] of k and v, which may then hold any number of entries
    // (hypotheses reading their source's cross-attention keys/values, shared); null: entry i. Keys and
    // values read through it take no gradient.
    const std::vector<std::size_t>* kv_rows = nullptr;
};
std::pair<Tensor, Tensor> multi_head_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                               const AttentionConfig& config);

// Decoding's attention when each sequence's keys/values are a cache of its own, at its own length (a continuous
// batch: sequences join and leave between steps, each at its own position). Sequence s owns the query rows
// [begin, end) of q (rows, 1, n_head * d_k) and attends over positions [0, length) of its k (.., capacity,
// n_head * d_k) and v (.., capacity, n_head * d_v), query row begin + i reading row (*row_map)[i] of them (row i
// without a map). No mask: a sequence's cache holds its own positions only. Returns (rows, 1, n_head * d_v),
// and records no graph. Each row's products and softmax are multi_head_attention's for that row alone, the
// same calls in the same order, so a sequence's numbers do not depend on the others in the batch.
struct CachedSequence {
    const Tensor* k = nullptr;
    const Tensor* v = nullptr;
    std::size_t length = 0;
    const std::vector<std::size_t>* row_map = nullptr;
    std::size_t begin = 0, end = 0;
};
Tensor attend_cached(const Tensor& q, const std::vector<CachedSequence>& sequences, std::size_t n_head, float scale);

}  // namespace ct
