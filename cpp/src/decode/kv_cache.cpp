#include "ctransformer/decode/kv_cache.hpp"

#include <algorithm>
#include <cstring>

#include "../parallel.hpp"
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

// Row i of a cache tensor (rows, capacity, width) becomes its row rows[i], in place, for as many rows as
// it has: only the rows that move are copied. A source row that is itself overwritten is saved first.
void gather_in_place(const Tensor& t, std::size_t length, const std::vector<std::size_t>& rows) {
    constexpr std::size_t kNone = std::size_t(-1);
    const std::size_t n = rows.size(), row = t.size(1) * t.size(2), held = length * t.size(2);
    thread_local std::vector<float> saved;
    thread_local std::vector<std::size_t> slot;
    slot.assign(n, kNone);
    std::size_t count = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const std::size_t s = rows[i];
        if (s != i && rows[s] != s && slot[s] == kNone) slot[s] = count++;
    }
    saved.resize(count * held);
    float* data = t.data();
    float* keep = saved.data();
    const std::size_t* where = slot.data();
    const std::size_t grain = copy_grain(held);
    parallel::parallel_for(n, grain, [&](std::size_t s0, std::size_t s1) {
        for (std::size_t s = s0; s < s1; ++s)
            if (where[s] != kNone) std::memcpy(keep + where[s] * held, data + s * row, held * sizeof(float));
    });
    parallel::parallel_for(n, grain, [&](std::size_t i0, std::size_t i1) {
        for (std::size_t i = i0; i < i1; ++i) {
            const std::size_t s = rows[i];
            if (s == i) continue;
            const float* from = where[s] != kNone ? keep + where[s] * held : data + s * row;
            std::memcpy(data + i * row, from, held * sizeof(float));
        }
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
    if (!kv.row_map.empty() || rows.size() != kv.rows() || !sole_owner(kv.k) || !sole_owner(kv.v)) {
        kv = select_rows(kv, rows);
        return;
    }
    gather_in_place(kv.k, kv.length, rows);
    gather_in_place(kv.v, kv.length, rows);
}

KeyValue select_rows(const KeyValue& kv, const std::vector<std::size_t>& rows) {
    if (kv.empty()) return kv;
    check_rows(kv.rows(), rows, "key/value cache");
    if (is_identity(rows, kv.rows())) return kv;   // every row where it is: nothing to copy
    const std::vector<std::size_t> from = through_map(kv, rows);
    return {select_held(kv.k, kv.length, from), select_held(kv.v, kv.length, from), kv.length, {}};
}

KeyValue share_rows(const KeyValue& kv, const std::vector<std::size_t>& rows) {
    if (kv.empty()) return kv;
    check_rows(kv.rows(), rows, "key/value cache");
    if (is_identity(rows, kv.rows())) return kv;
    KeyValue out{kv.k, kv.v, kv.length, through_map(kv, rows)};
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
