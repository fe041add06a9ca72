#include "ctransformer/nn/kv_cache.hpp"

#include <algorithm>
#include <cstring>

#include "ctransformer/error.hpp"

namespace ct::nn {

namespace {

// Positions [0, count) of `from` (rows, from_capacity, width) into positions [at, at + count) of
// `into` (rows, into_capacity, width).
void copy_positions(const float* from, std::size_t from_capacity, float* into, std::size_t into_capacity,
                    std::size_t at, std::size_t rows, std::size_t count, std::size_t width) {
    for (std::size_t r = 0; r < rows; ++r)
        std::memcpy(into + (r * into_capacity + at) * width, from + r * from_capacity * width, count * width * sizeof(float));
}

}  // namespace

void append_positions(KeyValue& cache, const Tensor& k, const Tensor& v) {
    if (k.dim() != 3 || v.dim() != 3 || k.size(0) != v.size(0) || k.size(1) != v.size(1))
        throw ValueError("append_positions: k and v must be (rows, s, n_head * d) with the same rows and s, got " +
                         shape_str(k.shape()) + " and " + shape_str(v.shape()));
    if (!cache.row_map.empty())
        throw ValueError("append_positions: this cache's rows share keys/values through a row map (a read-only cache, "
                         "such as cross-attention's); positions cannot be appended to it");
    const std::size_t rows = k.size(0), s = k.size(1);
    if (cache.empty()) cache = KeyValue{};   // nothing held: any room is re-made to k's and v's shapes
    if (!cache.empty() && (rows != cache.k.size(0) || k.size(2) != cache.k.size(2) || v.size(2) != cache.v.size(2)))
        throw ValueError("append_positions: the cache holds " + shape_str(cache.k.shape()) + " and " +
                         shape_str(cache.v.shape()) + " (rows, capacity, width); k " + shape_str(k.shape()) + " and v " +
                         shape_str(v.shape()) + " differ in rows or width");
    const std::size_t needed = cache.length + s;
    if (needed > cache.capacity()) {   // grow: double (at least 16 positions), keeping what is held
        const std::size_t capacity = std::max({needed, 2 * cache.capacity(), std::size_t(16)});
        KeyValue grown{Tensor(Array::from_shape({rows, capacity, k.size(2)})),
                       Tensor(Array::from_shape({rows, capacity, v.size(2)})), cache.length, {}};
        if (!cache.empty()) {
            copy_positions(cache.k.data(), cache.capacity(), grown.k.data(), capacity, 0, rows, cache.length, k.size(2));
            copy_positions(cache.v.data(), cache.capacity(), grown.v.data(), capacity, 0, rows, cache.length, v.size(2));
        }
        cache = std::move(grown);
    }
    copy_positions(k.data(), s, cache.k.data(), cache.capacity(), cache.length, rows, s, k.size(2));
    copy_positions(v.data(), s, cache.v.data(), cache.capacity(), cache.length, rows, s, v.size(2));
    cache.length = needed;
}

}  // namespace ct::nn
