#include "ctransformer/decode/kv_cache.hpp"

#include <algorithm>
#include <cstring>

#include "ctransformer/error.hpp"

namespace ct::decode {

namespace {

// Elements of one row (all dimensions but the first).
std::size_t row_size(const Shape& s) {
    std::size_t n = 1;
    for (std::size_t d = 1; d < s.size(); ++d) n *= s[d];
    return n;
}

void check_rows(std::size_t have, const std::vector<std::size_t>& rows, const char* what) {
    for (std::size_t r : rows)
        if (r >= have)
            throw IndexError(std::string("select_rows: row ") + std::to_string(r) + " of a " + what + " with " +
                             std::to_string(have) + " rows");
}

// The rows `rows` of a {data, shape} array (Mask, IndexArray), in that order.
template <class A>
A gather_rows(const A& x, const std::vector<std::size_t>& rows, const char* what) {
    check_rows(x.shape[0], rows, what);
    const std::size_t n = row_size(x.shape);
    A out{decltype(x.data)(rows.size() * n), x.shape};
    out.shape[0] = rows.size();
    for (std::size_t i = 0; i < rows.size(); ++i)
        std::copy_n(x.data.begin() + std::ptrdiff_t(rows[i] * n), n, out.data.begin() + std::ptrdiff_t(i * n));
    return out;
}

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
                       Tensor(Array::from_shape({rows, capacity, v.size(2)})), cache.length};
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

Tensor select_rows(const Tensor& t, const std::vector<std::size_t>& rows) {
    if (t.dim() < 1) throw ValueError("select_rows: a tensor of rank >= 1 is needed");
    Shape s = t.shape();
    check_rows(s[0], rows, "tensor");
    const std::size_t n = row_size(s);
    s[0] = rows.size();
    Array out = Array::from_shape(s);
    for (std::size_t i = 0; i < rows.size(); ++i) std::memcpy(out.data() + i * n, t.data() + rows[i] * n, n * sizeof(float));
    return Tensor(std::move(out));
}

KeyValue select_rows(const KeyValue& kv, const std::vector<std::size_t>& rows) {
    if (kv.empty()) return kv;
    return {select_rows(kv.k, rows), select_rows(kv.v, rows), kv.length};   // the room comes along
}

Mask select_rows(const Mask& m, const std::vector<std::size_t>& rows) {
    if (m.shape.empty() || m.shape[0] == 1) return m;   // broadcast over the rows: nothing to pick
    return gather_rows(m, rows, "mask");
}

IndexArray select_rows(const IndexArray& ids, const std::vector<std::size_t>& rows) {
    if (ids.shape.empty()) throw ValueError("select_rows: ids of rank >= 1 are needed");
    return gather_rows(ids, rows, "token-id array");
}

}  // namespace ct::decode
