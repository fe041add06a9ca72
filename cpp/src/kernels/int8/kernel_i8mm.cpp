// The aarch64 int8 matrix-multiply kernel (int8.hpp), for CPUs with I8MM (Graviton3 and 4, Neoverse N2/V1/V2,
// Apple M2 on).
//
// `smmla acc.4s, a.16b, w.16b` adds to a 2 x 2 block of int32 sums (two rows by two outputs) the products of two
// rows of 8 activations with two outputs' 8 weights: 32 multiply-adds, twice SDOT's, in one instruction of the
// same cost on those cores. Its operands pair rows, and pair outputs over 8 values of k, where the packed layout
// (int8.hpp) holds 16 outputs x 4 values a group. Two groups' vectors of 4 outputs, zipped by 32-bit lanes,
// give the operands of outputs (0, 1) and (2, 3) over 8 values; a pair of rows is two 8-byte loads. The sums
// are the exact int32 sums of every kernel and the epilogue the portable one's (neon_store.hpp): the same bits.
//
// A tile is up to 4 pairs of rows x 8 columns: 16 accumulators, 4 weight operands and 4 activation operands.
// Per 8 values of k, 16 SMMLA (512 multiply-adds) against 4 zips and 12 loads. A row left without a pair (m
// odd, m = 1 in greedy decoding) goes to the SDOT kernel, which wastes nothing on it.
// Compiled with a function target attribute; linear_int8 calls it only where the CPU reports i8mm and dotprod.
#include "kernels.hpp"

#if defined(__aarch64__)
#include <arm_neon.h>

#include <algorithm>

#include "neon_store.hpp"

#define CT_INT8_TARGET __attribute__((target("arch=armv8.6-a+i8mm")))

namespace ct::int8_kernels {

namespace {

// Rows [row, row + 2 RP) and the 8 columns from n (n a multiple of 8; cnt of them kept).
template <int RP>
CT_INT8_TARGET void tile(const Problem& p, std::size_t row, std::size_t n, std::size_t cnt) {
    const Int8Weight& w = *p.w;
    const std::size_t kg = w.k_groups();
    // the two vectors of 4 outputs holding columns n .. n + 7 of their panel of 16
    const std::int8_t* b = w.packed.data() + (n / 16) * kg * 64 + (n % 16) * 4;
    const std::int8_t* a[2 * RP];
    int32x4_t acc[RP][4];  // acc[q][j]: rows 2q, 2q + 1 by columns 2j, 2j + 1, as [r0 c0, r0 c1, r1 c0, r1 c1]
#pragma GCC unroll 4
    for (int q = 0; q < RP; ++q) {
        a[2 * q] = p.qx + (row + 2 * q) * p.lda;
        a[2 * q + 1] = a[2 * q] + p.lda;
        acc[q][0] = acc[q][1] = acc[q][2] = acc[q][3] = vdupq_n_s32(0);
    }
    std::size_t g = 0;
    for (; g + 2 <= kg; g += 2) {
        const int32x4_t lo0 = vreinterpretq_s32_s8(vld1q_s8(b + g * 64));
        const int32x4_t lo1 = vreinterpretq_s32_s8(vld1q_s8(b + g * 64 + 16));
        const int32x4_t hi0 = vreinterpretq_s32_s8(vld1q_s8(b + (g + 1) * 64));
        const int32x4_t hi1 = vreinterpretq_s32_s8(vld1q_s8(b + (g + 1) * 64 + 16));
        const int8x16_t wv[4] = {vreinterpretq_s8_s32(vzip1q_s32(lo0, hi0)), vreinterpretq_s8_s32(vzip2q_s32(lo0, hi0)),
                                 vreinterpretq_s8_s32(vzip1q_s32(lo1, hi1)), vreinterpretq_s8_s32(vzip2q_s32(lo1, hi1))};
#pragma GCC unroll 4
        for (int q = 0; q < RP; ++q) {
            const int8x16_t av = vcombine_s8(vld1_s8(a[2 * q] + 4 * g), vld1_s8(a[2 * q + 1] + 4 * g));
#pragma GCC unroll 4
            for (int j = 0; j < 4; ++j) acc[q][j] = vmmlaq_s32(acc[q][j], av, wv[j]);
        }
    }
    if (g < kg) {  // an odd last group: paired with zeros, in the weights and in the rows
        const int32x4_t zero = vdupq_n_s32(0);
        const int32x4_t lo0 = vreinterpretq_s32_s8(vld1q_s8(b + g * 64));
        const int32x4_t lo1 = vreinterpretq_s32_s8(vld1q_s8(b + g * 64 + 16));
        const int8x16_t wv[4] = {vreinterpretq_s8_s32(vzip1q_s32(lo0, zero)), vreinterpretq_s8_s32(vzip2q_s32(lo0, zero)),
                                 vreinterpretq_s8_s32(vzip1q_s32(lo1, zero)), vreinterpretq_s8_s32(vzip2q_s32(lo1, zero))};
#pragma GCC unroll 4
        for (int q = 0; q < RP; ++q) {
            std::int32_t r0, r1;
            __builtin_memcpy(&r0, a[2 * q] + 4 * g, 4);
            __builtin_memcpy(&r1, a[2 * q + 1] + 4 * g, 4);
            const int32x4_t pair = {r0, 0, r1, 0};
            const int8x16_t av = vreinterpretq_s8_s32(pair);
#pragma GCC unroll 4
            for (int j = 0; j < 4; ++j) acc[q][j] = vmmlaq_s32(acc[q][j], av, wv[j]);
        }
    }
    // Each row's 8 sums: the 64-bit halves of the blocks (row 0 in the low half, row 1 in the high).
    const TileScales<2> scales(p, n, cnt);
#pragma GCC unroll 4
    for (int q = 0; q < RP; ++q) {
        const int64x2_t c01 = vreinterpretq_s64_s32(acc[q][0]), c23 = vreinterpretq_s64_s32(acc[q][1]);
        const int64x2_t c45 = vreinterpretq_s64_s32(acc[q][2]), c67 = vreinterpretq_s64_s32(acc[q][3]);
        const int32x4_t first[2] = {vreinterpretq_s32_s64(vzip1q_s64(c01, c23)),
                                    vreinterpretq_s32_s64(vzip1q_s64(c45, c67))};
        const int32x4_t second[2] = {vreinterpretq_s32_s64(vzip2q_s64(c01, c23)),
                                     vreinterpretq_s32_s64(vzip2q_s64(c45, c67))};
        store_row(p, row + 2 * q, n, cnt, first, scales.ws, scales.bias);
        store_row(p, row + 2 * q + 1, n, cnt, second, scales.ws, scales.bias);
    }
}

template <int RP>
CT_INT8_TARGET void rows(const Problem& p, std::size_t row, std::size_t n0, std::size_t n1) {
    for (std::size_t n = n0; n < n1; n += 8) tile<RP>(p, row, n, std::min<std::size_t>(8, n1 - n));
}

}  // namespace

CT_INT8_TARGET void i8mm(const Problem& p, std::size_t n0, std::size_t n1) {
    const std::size_t pairs = p.m / 2;
    // Column panels of 64 outermost, so one panel of the weight (64 x k bytes) stays in cache for every row.
    for (std::size_t c = n0; c < n1; c += 64) {
        const std::size_t c1 = std::min(n1, c + 64);
        std::size_t q = 0;
        for (; q + 4 <= pairs; q += 4) rows<4>(p, 2 * q, c, c1);
        switch (pairs - q) {
            case 3: rows<3>(p, 2 * q, c, c1); break;
            case 2: rows<2>(p, 2 * q, c, c1); break;
            case 1: rows<1>(p, 2 * q, c, c1); break;
            default: break;
        }
    }
    if (p.m % 2) {  // the last row alone
        const std::size_t last = p.m - 1;
        Problem one = p;
        one.m = 1;
        one.qx = p.qx + last * p.lda;
        if (p.acc_out) {
            one.acc_out = p.acc_out + last * p.w->out_features;
        } else {
            one.row_scale = p.row_scale + last;
            one.y = p.y + last * p.ldy;
        }
        dotprod(one, n0, n1);
    }
}

}  // namespace ct::int8_kernels

#endif
