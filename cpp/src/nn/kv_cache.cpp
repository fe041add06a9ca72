#include "ctransformer/nn/kv_cache.hpp"

#include <algorithm>
#include <cstring>

#include "ctransformer/error.hpp"

namespace ct::nn {

namespace {

// Positions [0, count) of rows from_row(r) of `from` (.., from_capacity, width) into positions [at, at + count)
// of rows into_row(r) of `into` (.., into_capacity, width), for r < rows.
template <class FromRow, class IntoRow>
void copy_positions(const float* from, std::size_t from_capacity, FromRow from_row, float* into,
                    std::size_t into_capacity, IntoRow into_row, std::size_t at, std::size_t rows, std::size_t count,
                    std::size_t width) {
    for (std::size_t r = 0; r < rows; ++r)
        std::memcpy(into + (into_row(r) * into_capacity + at) * width, from + from_row(r) * from_capacity * width,
                    count * width * sizeof(float));
}

}  // namespace

bool has_repeats(const std::vector<std::size_t>& row_map, std::size_t n) {
    std::vector<bool> seen(n);
    for (std::size_t r : row_map) {
        if (r >= n || seen[r]) return true;
        seen[r] = true;
    }
    return false;
}

void append_positions(KeyValue& cache, const Tensor& k, const Tensor& v) {
    append_positions(cache, k, v, 0, k.dim() == 3 ? k.size(0) : 0);
}

void append_positions(KeyValue& cache, const Tensor& k, const Tensor& v, std::size_t row_begin, std::size_t rows) {
    if (k.dim() != 3 || v.dim() != 3 || k.size(0) != v.size(0) || k.size(1) != v.size(1))
        throw ValueError("append_positions: k and v must be (rows, s, n_head * d) with the same rows and s, got " +
                         shape_str(k.shape()) + " and " + shape_str(v.shape()));
    if (row_begin > k.size(0) || rows > k.size(0) - row_begin || rows == 0)
        throw ValueError("append_positions: rows [" + std::to_string(row_begin) + ", " + std::to_string(row_begin + rows) +
                         ") of k and v, which hold " + std::to_string(k.size(0)));
    const std::size_t s = k.size(1);
    if (cache.empty()) cache = KeyValue{{}, {}, 0, {}, cache.reserve};   // nothing held: any room is re-made to k's and v's shapes
    if (!cache.empty() && (rows != cache.rows() || k.size(2) != cache.k.size(2) || v.size(2) != cache.v.size(2)))
        throw ValueError("append_positions: the cache holds " + std::to_string(cache.rows()) + " rows of " +
                         shape_str(cache.k.shape()) + " and " + shape_str(cache.v.shape()) +
                         " (rows, capacity, width); k " + shape_str(k.shape()) + " and v " + shape_str(v.shape()) +
                         " differ in rows or width");
    if (!cache.row_map.empty() && has_repeats(cache.row_map, cache.k.size(0)))
        throw ValueError("append_positions: this cache's rows share keys/values (a row map with repeats: a read-only "
                         "cache, such as cross-attention's); positions cannot be appended to it");
    const auto same = [](std::size_t r) { return r; };
    const auto mapped = [&cache](std::size_t r) { return cache.row(r); };
    const std::size_t needed = cache.length + s;
    if (needed > cache.capacity()) {   // grow: double (at least 16 positions and the room reserved), keeping what is held
        const std::size_t capacity = std::max({needed, 2 * cache.capacity(), std::size_t(16), cache.reserve});
        KeyValue grown{Tensor(Array::from_shape({rows, capacity, k.size(2)})),
                       Tensor(Array::from_shape({rows, capacity, v.size(2)})), cache.length, {}, cache.reserve};
        if (!cache.empty()) {
            copy_positions(cache.k.data(), cache.capacity(), mapped, grown.k.data(), capacity, same, 0, rows, cache.length,
                           k.size(2));
            copy_positions(cache.v.data(), cache.capacity(), mapped, grown.v.data(), capacity, same, 0, rows, cache.length,
                           v.size(2));
        }
        cache = std::move(grown);
    }
    const float* k_rows = k.data() + row_begin * s * k.size(2);
    const float* v_rows = v.data() + row_begin * s * v.size(2);
    copy_positions(k_rows, s, same, cache.k.data(), cache.capacity(), mapped, cache.length, rows, s, k.size(2));
    copy_positions(v_rows, s, same, cache.v.data(), cache.capacity(), mapped, cache.length, rows, s, v.size(2));
    cache.length = needed;
}

}  // namespace ct::nn
