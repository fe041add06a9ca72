// Key/value caches for cached (incremental) decoding, as the attention layers keep them.
//
// A decoder's output at position t depends only on positions 0..t (causal), and the keys and
// values attention reads at an earlier position never change once that position is decoded. So
// the keys/values of every earlier position can be kept, and each new position only projects its
// own and appends them: one position's work per token instead of the prefix's. The layers' forwards
// take such a cache (DecoderLayer, gpt::TransformerLayer); decode/ owns them between steps.
#pragma once
#include <vector>

#include "ctransformer/runtime/tensor.hpp"

namespace ct::nn {

// One attention's keys k (rows, capacity, n_head * d_k) and values v (rows, capacity, n_head * d_v),
// in the projections' layout (head h in columns [h d, (h + 1) d)), which the fused attention reads in
// place (AttentionConfig::kv_length). Positions [0, length) are held; the rest is room, so appending a
// position writes only that position instead of copying the cache. Copies share storage, as torch
// tensors do: append to one of them only.
//
// row_map, when not empty: row i of the cache is row row_map[i] of k and v, so rows can be dropped or
// reordered without copying them (decode/kv_cache.hpp). A map with repeats shares rows and is read-only (a
// source's cross-attention keys/values, read by each hypothesis of its beam); rows of k and v outside the
// map are free room.
struct KeyValue {
    Tensor k, v;
    std::size_t length = 0;   // positions held
    std::vector<std::size_t> row_map;
    // Room to make, at least, when the cache grows: the positions a caller knows it will hold (a generate call's
    // or a served request's prompt and new tokens), so it grows once. Growing by doubling copies what is held into fresh
    // memory, which the OS zeroes first: at GPT-2's batch 32 after a 128-token prompt, 600 MB of new pages, a
    // fifth of the next 32 steps' time on an Intel Xeon.
    std::size_t reserve = 0;
    bool empty() const { return length == 0; }
    std::size_t rows() const { return !row_map.empty() ? row_map.size() : k.dim() == 3 ? k.size(0) : 0; }
    std::size_t row(std::size_t i) const { return row_map.empty() ? i : row_map[i]; }   // row i's in k and v
    std::size_t capacity() const { return k.dim() == 3 ? k.size(1) : 0; }   // room allocated, held or not
};

// Appends the positions of k (rows, s, n_head * d_k) and v (rows, s, n_head * d_v) to the cache, in
// place; when the room runs out the capacity doubles (one copy of what is held). A constant (no graph):
// decoding runs under no-grad. Row i's positions go to row row(i) of the storage; a map with repeats is
// refused (read-only). Growing copies the rows in the map's order and drops the map.
void append_positions(KeyValue& cache, const Tensor& k, const Tensor& v);
// The same with rows [row_begin, row_begin + rows) of k and v only (a continuous batch's step computes every
// sequence's keys/values in one product, and each sequence's cache takes its own rows).
void append_positions(KeyValue& cache, const Tensor& k, const Tensor& v, std::size_t row_begin, std::size_t rows);
// Whether a row map names some row twice (n: rows of the storage it maps into).
bool has_repeats(const std::vector<std::size_t>& row_map, std::size_t n);

}  // namespace ct::nn
