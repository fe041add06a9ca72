#include "ctransformer/decode/kv_cache.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "../runtime/parallel.hpp"
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

}  // namespace

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

namespace {

// Rows a thread copies at least: the copies of a step (every layer's keys and values, at batch 32 x beam 5
// a few MB) are a serial tenth of a beam step on one thread, and two threads copy faster than one.
std::size_t copy_grain(std::size_t floats_per_row) {
    return std::max<std::size_t>(1, 16384 / std::max<std::size_t>(floats_per_row, 1));
}

// Rows `rows` of a cache tensor (rows, capacity, width): only the positions held, [0, length), are
// copied (the room past them is room, whatever it holds); the result keeps the capacity.
Tensor select_held(const Tensor& t, std::size_t length, const std::vector<std::size_t>& rows) {
    const std::size_t capacity = t.size(1), width = t.size(2);
    Array out = Array::from_shape({rows.size(), capacity, width});
    float* o = out.data();
    const float* in = t.data();
    parallel::parallel_for(rows.size(), copy_grain(length * width), [&](std::size_t i0, std::size_t i1) {
        for (std::size_t i = i0; i < i1; ++i)
            std::memcpy(o + i * capacity * width, in + rows[i] * capacity * width, length * width * sizeof(float));
    });
    return Tensor(std::move(out));
}

bool is_identity(const std::vector<std::size_t>& rows, std::size_t have) {
    if (rows.size() != have) return false;
    for (std::size_t i = 0; i < rows.size(); ++i)
        if (rows[i] != i) return false;
    return true;
}

// Whether no other tensor, nor anyone outside (a StepDecoder's caller), sees t's storage.
bool sole_owner(const Tensor& t) { return t.impl().use_count() == 1 && t.impl()->storage.use_count() == 1; }

// Row `to` of a cache tensor (rows, capacity, width) becomes a copy of its row `from`, positions [0, length),
// for each pair; the pairs split over the threads.
void copy_rows_in_place(const Tensor& t, std::size_t length,
                        const std::vector<std::pair<std::size_t, std::size_t>>& pairs) {
    const std::size_t row = t.size(1) * t.size(2), held = length * t.size(2);
    float* data = t.data();
    parallel::parallel_for(pairs.size(), copy_grain(held), [&](std::size_t i0, std::size_t i1) {
        for (std::size_t i = i0; i < i1; ++i)
            std::memcpy(data + pairs[i].second * row, data + pairs[i].first * row, held * sizeof(float));
    });
}

// The rows of kv's k and v that rows name through kv's row map (rows itself without one).
std::vector<std::size_t> through_map(const KeyValue& kv, const std::vector<std::size_t>& rows) {
    if (kv.row_map.empty()) return rows;
    std::vector<std::size_t> out(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) out[i] = kv.row_map[rows[i]];
    return out;
}

}  // namespace

void select_rows_in_place(KeyValue& kv, const std::vector<std::size_t>& rows) {
    if (kv.empty()) return;
    check_rows(kv.rows(), rows, "key/value cache");
    if (is_identity(rows, kv.rows())) return;
    const std::size_t storage_rows = kv.k.size(0);
    if (!sole_owner(kv.k) || !sole_owner(kv.v) || (!kv.row_map.empty() && has_repeats(kv.row_map, storage_rows))) {
        kv = select_rows(kv, rows);
        return;
    }
    // New row i is old row rows[i]: the first to name a storage row takes it over as it is; a repeat gets a
    // storage row no new row names (a dropped row's) and a copy of the positions held.
    std::vector<std::size_t> map(rows.size());
    std::vector<bool> taken(storage_rows);
    std::vector<std::size_t> repeats;
    for (std::size_t i = 0; i < rows.size(); ++i) {
        map[i] = kv.row(rows[i]);
        if (taken[map[i]])
            repeats.push_back(i);
        else
            taken[map[i]] = true;
    }
    std::vector<std::pair<std::size_t, std::size_t>> copies;   // (from, to) storage rows
    std::size_t free_row = 0;
    for (std::size_t i : repeats) {
        while (free_row < storage_rows && taken[free_row]) ++free_row;
        if (free_row == storage_rows) {   // more rows than the storage holds: a fresh copy
            kv = select_rows(kv, rows);
            return;
        }
        copies.emplace_back(map[i], free_row);
        map[i] = free_row;
        taken[free_row] = true;
    }
    copy_rows_in_place(kv.k, kv.length, copies);
    copy_rows_in_place(kv.v, kv.length, copies);
    kv.row_map = std::move(map);
    if (is_identity(kv.row_map, storage_rows)) kv.row_map.clear();
}

KeyValue select_rows(const KeyValue& kv, const std::vector<std::size_t>& rows) {
    if (kv.empty()) return kv;
    check_rows(kv.rows(), rows, "key/value cache");
    if (is_identity(rows, kv.rows())) return kv;   // every row where it is: nothing to copy
    const std::vector<std::size_t> from = through_map(kv, rows);
    return {select_held(kv.k, kv.length, from), select_held(kv.v, kv.length, from), kv.length, {}, kv.reserve};
}

KeyValue share_rows(const KeyValue& kv, const std::vector<std::size_t>& rows) {
    if (kv.empty()) return kv;
    check_rows(kv.rows(), rows, "key/value cache");
    if (is_identity(rows, kv.rows())) return kv;
    KeyValue out{kv.k, kv.v, kv.length, through_map(kv, rows), kv.reserve};
    if (is_identity(out.row_map, kv.k.size(0))) out.row_map.clear();   // back to one row each, in order
    return out;
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
