// MultiHeadAttention (seed 000 post-norm, seed 003 pre-norm) split at its keys/values, so they can
// come from a cache. Together the two calls compute exactly what MultiHeadAttention::forward does:
//
//   forward(q, k, v, mask) == attend_projected(mha, q, project_kv(mha, k [, v]), mask)
//
// (for k = v, as both the self- and the cross-attention have it). They are free functions over the
// module's public parts, leaving its own forward path as it is.
#pragma once
#include <utility>

#include "ctransformer/decode/kv_cache.hpp"
#include "ctransformer/nn/multi_head_attention.hpp"

namespace ct::decode {

// The keys and values of kv_input (b, L, d_model), (b, L, n_head * d) each, full (capacity = length
// = L): w_ks / w_vs of LN(kv_input) when the sub-layer is pre-norm (seed 003's one LayerNorm on Q, K
// and V), of kv_input otherwise.
KeyValue project_kv(const nn::MultiHeadAttention& mha, const Tensor& kv_input);

// The rest of the sub-layer for the queries q (b, Lq, d_model) over the Lk = kv.length positions
// of kv (MultiHeadAttention::attend, reading the cache in place): the query projection, the scaled
// dot-product attention with its mask fill (-1e9 or -inf) where mask == 0, the output projection,
// dropout, the residual (the un-normalised q) and, post-norm, the LayerNorm. mask is
// (b or 1, Lq or 1, Lk), or null. Returns (output (b, Lq, d_model), attn (b, n_head, Lq, Lk)).
std::pair<Tensor, Tensor> attend_projected(const nn::MultiHeadAttention& mha, const Tensor& q, const KeyValue& kv,
                                           const Mask* mask = nullptr);

}  // namespace ct::decode
