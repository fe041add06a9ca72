// Key/value caches for incremental decoding.
//
// A decoder's output at position t depends only on positions 0..t (causal), and the keys and
// values attention reads at an earlier position never change once that position is decoded. So
// the keys/values of every earlier position can be kept, split into heads, and each new position
// only projects its own and appends them: one position's work per token instead of the prefix's.
// The encoder output, which every target position reads through the cross-attention, is projected
// into keys/values once per source.
//
// Rows are hypotheses (a batch row, or a beam); select_rows() keeps, reorders or repeats them
// (greedy decoding drops the rows that have ended; beam search follows each survivor's parent).
#pragma once
#include <vector>

#include "ctransformer/tensor.hpp"

namespace ct::decode {

// One attention's keys k (rows, n_head, t, d_k) and values v (rows, n_head, t, d_v); empty before
// the first position.
struct KeyValue {
    Tensor k, v;
    bool empty() const { return k.dim() != 4; }
    std::size_t rows() const { return empty() ? 0 : k.size(0); }
    std::size_t length() const { return empty() ? 0 : k.size(2); }   // positions held
};

// cache followed by fresh along the positions (dim 2) of (rows, heads, t, d) tensors; an empty cache
// gives fresh. A constant (no graph): decoding runs under no-grad.
Tensor append_positions(const Tensor& cache, const Tensor& fresh);
KeyValue append_positions(const KeyValue& cache, const KeyValue& fresh);

// Slices rows[0], rows[1], ... of dimension 0, in that order (repeats allowed).
Tensor select_rows(const Tensor& t, const std::vector<std::size_t>& rows);
KeyValue select_rows(const KeyValue& kv, const std::vector<std::size_t>& rows);
// A mask with one row (broadcast over the batch) is returned as it is.
Mask select_rows(const Mask& m, const std::vector<std::size_t>& rows);
IndexArray select_rows(const IndexArray& ids, const std::vector<std::size_t>& rows);

}  // namespace ct::decode
