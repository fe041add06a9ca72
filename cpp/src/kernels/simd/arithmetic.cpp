// arithmetic.hpp's loops, for one level (tables.hpp): the op is chosen once per call, outside the loop, so
// each loop is one operation GCC vectorises for the level's vectors.
#include "arithmetic.hpp"

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "per_level.hpp"

namespace ct::kernels {
namespace CT_LOOP_LEVEL {

namespace {

struct Add { static float f(float x, float y) { return x + y; } };
struct Sub { static float f(float x, float y) { return x - y; } };
struct Mul { static float f(float x, float y) { return x * y; } };
struct Div { static float f(float x, float y) { return x / y; } };

// body(Op{}) with the op as a type, so the loop inside is compiled once per op.
template <class Body>
void with_op(Arith op, Body&& body) {
    switch (op) {
        case Arith::Add: return body(Add{});
        case Arith::Sub: return body(Sub{});
        case Arith::Mul: return body(Mul{});
        default: return body(Div{});
    }
}

// d[i] = v(i), or d[i] += v(i).
template <class V>
void write(float* d, std::size_t begin, std::size_t end, bool accumulate, V v) {
    if (accumulate)
        for (std::size_t i = begin; i < end; ++i) d[i] += v(i);
    else
        for (std::size_t i = begin; i < end; ++i) d[i] = v(i);
}

void binary(Arith op, const float* a, const float* b, std::size_t inner, float* out, std::size_t begin,
            std::size_t end) {
    with_op(op, [&](auto o) {
        using Op = decltype(o);
        if (inner >= end) {  // b the output's size
            for (std::size_t i = begin; i < end; ++i) out[i] = Op::f(a[i], b[i]);
            return;
        }
        for (std::size_t i = begin; i < end;) {  // row by row of b's size: no modulo inside the loop
            const std::size_t j0 = i % inner, stop = std::min(end, i - j0 + inner);
            const float* row = b - (i - j0);
            for (; i < stop; ++i) out[i] = Op::f(a[i], row[i]);
        }
    });
}

void with_scalar(Arith op, const float* x, float s, float* y, std::size_t n) {
    with_op(op, [&](auto o) {
        using Op = decltype(o);
        for (std::size_t i = 0; i < n; ++i) y[i] = Op::f(x[i], s);
    });
}

void grad_a(Arith op, const float* g, const float* b, std::size_t inner, float* d, std::size_t begin,
            std::size_t end, bool accumulate) {
    switch (op) {
        case Arith::Add: case Arith::Sub: return write(d, begin, end, accumulate, [g](std::size_t i) { return g[i]; });
        default: break;
    }
    // d(a b)/da = b, d(a / b)/da = 1 / b, row by row of b's size as binary() walks.
    with_op(op, [&](auto o) {
        using Op = decltype(o);
        for (std::size_t i = begin; i < end;) {
            const std::size_t j0 = i % inner, stop = std::min(end, i - j0 + inner);
            const float* row = b - (i - j0);
            write(d, i, stop, accumulate, [g, row](std::size_t k) { return Op::f(g[k], row[k]); });
            i = stop;
        }
    });
}

// d(a op b)/db times g at element i, with b[i] read at bi.
template <class Op>
float db(const float* g, const float* a, const float* b, std::size_t i, std::size_t bi) {
    if constexpr (std::is_same_v<Op, Add>) return g[i];
    else if constexpr (std::is_same_v<Op, Sub>) return -g[i];
    else if constexpr (std::is_same_v<Op, Mul>) return g[i] * a[i];
    else return -g[i] * a[i] / (b[bi] * b[bi]);  // d(a/b)/db = -a/b^2
}

void grad_b(Arith op, const float* g, const float* a, const float* b, float* d, std::size_t begin,
            std::size_t end, bool accumulate) {
    with_op(op, [&](auto o) {
        using Op = decltype(o);
        write(d, begin, end, accumulate, [=](std::size_t i) { return db<Op>(g, a, b, i, i); });
    });
}

void grad_b_rows(Arith op, const float* g, const float* a, const float* b, std::size_t outer, std::size_t inner,
                 float* d, std::size_t j0, std::size_t j1, bool accumulate) {
    with_op(op, [&](auto o) {
        using Op = decltype(o);
        if (!accumulate) std::fill(d + j0, d + j1, 0.0f);
        for (std::size_t r = 0; r < outer; ++r) {
            const std::size_t base = r * inner;
            for (std::size_t j = j0; j < j1; ++j) d[j] += db<Op>(g, a, b, base + j, j);
        }
    });
}

void scaled(const float* g, float s, float* d, std::size_t n, bool accumulate) {
    write(d, 0, n, accumulate, [g, s](std::size_t i) { return g[i] * s; });
}

}  // namespace
}  // namespace CT_LOOP_LEVEL

CT_LOOP_TABLE(ArithmeticLoops, arithmetic_loops) = {CT_LOOP_LEVEL::binary,      CT_LOOP_LEVEL::with_scalar,
                                                    CT_LOOP_LEVEL::grad_a,      CT_LOOP_LEVEL::grad_b,
                                                    CT_LOOP_LEVEL::grad_b_rows, CT_LOOP_LEVEL::scaled};
CT_LOOP_SELECT(ArithmeticLoops, arithmetic_loops)

}  // namespace ct::kernels
