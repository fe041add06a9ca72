// Inside linear_int8 (int8.hpp): the kernels, each computing every row of the product for a range of
// output columns, and each quantising rows of activations. All of them give the same exact int32 sums
// and the same float32 results (int8.hpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "ctransformer/int8.hpp"

namespace ct::int8_kernels {

// y[m, n] = float(acc[m, n]) * (row_scale[m] * w.scale[n]) + bias[n] for n in [n0, n1), n0 a multiple of
// 16; or, with acc_out set, acc itself into acc_out (ld = w.out_features) and y untouched.
struct Problem {
    std::size_t m;
    const std::int8_t* qx;    // (m, lda) quantised rows, zero from in_features up to lda
    std::size_t lda;          // w.k_groups() * 4
    const float* row_scale;   // (m,): s_x alpha
    const Int8Weight* w;
    const float* bias;        // (out,) or null
    float* y;
    std::size_t ldy;
    std::int32_t* acc_out;
    // No q is negative (a ReLU's output): the avx2 kernel then multiplies q itself as vpmaddubsw's unsigned
    // operand, with no sign moved over (kernel_ymm.inc). Set by linear_int8.
    bool nonnegative = false;
};

using Kernel = void (*)(const Problem& p, std::size_t n0, std::size_t n1);
// q[0:cols] and scale of one row (int8.hpp's rule; q beyond cols is not written).
using QuantizeRow = void (*)(const float* x, std::size_t cols, std::int8_t* q, float* scale);

void portable(const Problem& p, std::size_t n0, std::size_t n1);
void quantize_row_portable(const float* x, std::size_t cols, std::int8_t* q, float* scale);
#if defined(__x86_64__)
void avx2(const Problem& p, std::size_t n0, std::size_t n1);
void avx_vnni(const Problem& p, std::size_t n0, std::size_t n1);
void quantize_row_avx2(const float* x, std::size_t cols, std::int8_t* q, float* scale);
void avx512_vnni(const Problem& p, std::size_t n0, std::size_t n1);
void quantize_row_avx512(const float* x, std::size_t cols, std::int8_t* q, float* scale);
void amx_int8(const Problem& p, std::size_t n0, std::size_t n1);   // up to 8 rows: avx512_vnni
#endif
#if defined(__aarch64__)
void dotprod(const Problem& p, std::size_t n0, std::size_t n1);
void i8mm(const Problem& p, std::size_t n0, std::size_t n1);   // also needs dotprod
void neon(const Problem& p, std::size_t n0, std::size_t n1);   // any aarch64 CPU
#endif

// max |x[i]| as float bits compared as integers, so a NaN (whose bits exceed inf's) is never lost the way
// a float max can lose it; then the scale and the multiplier of the rule in int8.hpp. nonzero_finite is false
// for a row of zeros (q 0, scale 0) and for a row holding NaN or inf (q 0 and its scale that amax, so its
// outputs are NaN).
struct RowRange {
    float scale, inv;
    bool nonzero_finite;
};
inline RowRange row_range(std::uint32_t amax_bits) {
    float amax;
    __builtin_memcpy(&amax, &amax_bits, 4);
    if (amax_bits >= 0x7F800000u || amax_bits == 0) return {amax, 0.0f, false};
    return {amax / 127.0f, 127.0f / amax, true};
}

}  // namespace ct::int8_kernels
