// Key/value caches between decoding steps: the rows of a cache (nn/kv_cache.hpp: KeyValue, filled by
// the layers' cached forwards) are hypotheses (a batch row, or a beam); select_rows() keeps, reorders
// or repeats them (greedy decoding drops the rows that have ended; beam search follows each
// survivor's parent).
#pragma once
#include <vector>

#include "ctransformer/nn/kv_cache.hpp"
#include "ctransformer/runtime/tensor.hpp"

namespace ct::decode {

// The cache itself lives with the layers that fill it (nn/kv_cache.hpp).
using nn::KeyValue;
using nn::append_positions;
using nn::has_repeats;

// Slices rows[0], rows[1], ... of dimension 0, in that order (repeats allowed).
Tensor select_rows(const Tensor& t, const std::vector<std::size_t>& rows);
// (A cache with a row map gives a copy without one.)
KeyValue select_rows(const KeyValue& kv, const std::vector<std::size_t>& rows);
// The same rows as select_rows, by a row map over kv's keys/values: nothing is copied, and the result is
// read-only (KeyValue::row_map). For the cross-attention's caches, which decoding never appends to.
KeyValue share_rows(const KeyValue& kv, const std::vector<std::size_t>& rows);
// kv = select_rows(kv, rows) through kv's row map, in kv's storage when nothing else holds it: a row kept,
// moved or dropped changes the map only; a row repeated (a hypothesis with two surviving children) is
// copied into a storage row that was dropped. A fresh copy would be page faults and copies of every row at
// every beam step; moving rows in place would still copy most of them whenever a sentence ends.
void select_rows_in_place(KeyValue& kv, const std::vector<std::size_t>& rows);
// A mask with one row (broadcast over the batch) is returned as it is.
Mask select_rows(const Mask& m, const std::vector<std::size_t>& rows);
IndexArray select_rows(const IndexArray& ids, const std::vector<std::size_t>& rows);

}  // namespace ct::decode
