// Element-wise arithmetic (add, sub, mul, div of two arrays, or of an array and a scalar) and its
// gradients, over a range of elements per call, per level (tables.hpp). Plain loops that GCC vectorises
// for the level's vectors. b is either the output's size (inner = n) or repeats over its rows (a bias, a
// position table: b[i % inner]); ops/elementwise.cpp takes the general broadcasting walk itself.
// One rounding per element in every loop but the gradient of a quotient's divisor (-g a / b^2), so the
// levels agree in every bit except there and where an FMA contracts an accumulation (d += g * b).
#pragma once
#include <cstddef>

#include "tables.hpp"

namespace ct::kernels {

enum class Arith : int { Add, Sub, Mul, Div };

struct ArithmeticLoops {
    // out[i] = a[i] op b[i % inner] for i in [begin, end).
    void (*binary)(Arith op, const float* a, const float* b, std::size_t inner, float* out, std::size_t begin,
                   std::size_t end);
    // y[i] = x[i] op s for i < n (sub and div by the scalar on the right).
    void (*with_scalar)(Arith op, const float* x, float s, float* y, std::size_t n);
    // d[i] (+)= d(a op b)/da * g[i] for i in [begin, end): g (add, sub), g b[i % inner] (mul),
    // g / b[i % inner] (div). accumulate adds to d instead of writing it.
    void (*grad_a)(Arith op, const float* g, const float* b, std::size_t inner, float* d, std::size_t begin,
                   std::size_t end, bool accumulate);
    // d[i] (+)= d(a op b)/db * g[i] for i in [begin, end), b the output's size: g, -g, g a[i],
    // -g a[i] / b[i]^2.
    void (*grad_b)(Arith op, const float* g, const float* a, const float* b, float* d, std::size_t begin,
                   std::size_t end, bool accumulate);
    // The same for b repeated over `outer` rows of `inner`: d[j] (+)= sum over the rows o of
    // d(a op b)/db * g at o inner + j, for the columns j in [j0, j1), the rows added in order.
    void (*grad_b_rows)(Arith op, const float* g, const float* a, const float* b, std::size_t outer,
                        std::size_t inner, float* d, std::size_t j0, std::size_t j1, bool accumulate);
    // d[i] (+)= g[i] * s for i < n: a scalar op's gradient (s = the scalar, its inverse, or 1).
    void (*scaled)(const float* g, float s, float* d, std::size_t n, bool accumulate);
};

CT_LOOP_TABLES(ArithmeticLoops, arithmetic_loops)

}  // namespace ct::kernels
