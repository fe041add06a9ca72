// The aarch64 dot-product int8 kernel (int8.hpp), for CPUs with SDOT (Graviton2 on, Ampere Altra, Apple M1 on).
//
// The packed layout fits SDOT as it fits vpdpbusd: a group of 4 values of k for 16 outputs is 64 bytes, four
// 16-byte vectors of 4 outputs x 4 values. `sdot acc.4s, w.16b, a.4b[lane]` adds to each output's int32 the dot
// product of its 4 weights with one row's 4 activations, a lane of a 16-byte vector holding 4 groups of k. SDOT
// multiplies signed by signed bytes, so unlike vpdpbusd no offset and no row sum: the sums are the exact int32
// sums of every other kernel, and the float32 epilogue is the portable kernel's, operation by operation
// (neon_store.hpp): the same bits on every CPU.
//
// A tile is up to 4 rows x 16 columns: 16 accumulators, 4 weight vectors and 4 activation vectors of the 32
// NEON registers. 16 multiply-adds a SDOT, one 16-byte load of weight per 4 SDOTs.
// Compiled with a function target attribute; linear_int8 calls it only where the CPU reports dotprod.
#include "kernels.hpp"

#if defined(__aarch64__)
#include <arm_neon.h>

#include <algorithm>

#include "neon_store.hpp"

#define CT_INT8_TARGET __attribute__((target("arch=armv8.2-a+dotprod")))

namespace ct::int8_kernels {

namespace {

// acc[v] += the 4 weight vectors of one group times one row's group, which is lane L of `a`.
template <int L>
CT_INT8_TARGET inline void dot_group(int32x4_t (&acc)[4], const int8x16_t (&w)[4], int8x16_t a) {
    acc[0] = vdotq_laneq_s32(acc[0], w[0], a, L);
    acc[1] = vdotq_laneq_s32(acc[1], w[1], a, L);
    acc[2] = vdotq_laneq_s32(acc[2], w[2], a, L);
    acc[3] = vdotq_laneq_s32(acc[3], w[3], a, L);
}

CT_INT8_TARGET inline void load_group(const std::int8_t* b, int8x16_t (&w)[4]) {
    w[0] = vld1q_s8(b);
    w[1] = vld1q_s8(b + 16);
    w[2] = vld1q_s8(b + 32);
    w[3] = vld1q_s8(b + 48);
}

// Rows [row, row + MR) of the product for the 16 columns from n (a multiple of 16); cnt of them are kept.
template <int MR>
CT_INT8_TARGET void tile(const Problem& p, std::size_t row, std::size_t n, std::size_t cnt) {
    const Int8Weight& w = *p.w;
    const std::size_t kg = w.k_groups();
    const std::int8_t* b = w.packed.data() + (n / 16) * kg * 64;
    const std::int8_t* a[MR];
    int32x4_t acc[MR][4];
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
        a[r] = p.qx + (row + r) * p.lda;
        acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = vdupq_n_s32(0);
    }
    int8x16_t wv[4];
    std::size_t g = 0;
    // Four groups at a time: one 16-byte load of each row's activations, its lanes the four groups.
    for (; g + 4 <= kg; g += 4) {
        int8x16_t av[MR];
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) av[r] = vld1q_s8(a[r] + 4 * g);
        load_group(b + g * 64, wv);
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) dot_group<0>(acc[r], wv, av[r]);
        load_group(b + (g + 1) * 64, wv);
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) dot_group<1>(acc[r], wv, av[r]);
        load_group(b + (g + 2) * 64, wv);
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) dot_group<2>(acc[r], wv, av[r]);
        load_group(b + (g + 3) * 64, wv);
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) dot_group<3>(acc[r], wv, av[r]);
    }
    // The last 1-3 groups: a row holds only lda = 4 kg bytes, so each group is read alone (its 4 bytes in lane 0).
    for (; g < kg; ++g) {
        load_group(b + g * 64, wv);
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) {
            std::int32_t four;
            __builtin_memcpy(&four, a[r] + 4 * g, 4);
            dot_group<0>(acc[r], wv, vreinterpretq_s8_s32(vdupq_n_s32(four)));
        }
    }
    const TileScales<4> scales(p, n, cnt);
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) store_row(p, row + r, n, cnt, acc[r], scales.ws, scales.bias);
}

template <int MR>
CT_INT8_TARGET void rows(const Problem& p, std::size_t row, std::size_t n0, std::size_t n1) {
    for (std::size_t n = n0; n < n1; n += 16) tile<MR>(p, row, n, std::min<std::size_t>(16, n1 - n));
}

}  // namespace

CT_INT8_TARGET void dotprod(const Problem& p, std::size_t n0, std::size_t n1) {
    // Column panels of 64 outermost, so one panel of the weight (64 x k bytes) stays in cache for every row.
    for (std::size_t c = n0; c < n1; c += 64) {
        const std::size_t c1 = std::min(n1, c + 64);
        std::size_t i = 0;
        for (; i + 4 <= p.m; i += 4) rows<4>(p, i, c, c1);
        switch (p.m - i) {
            case 3: rows<3>(p, i, c, c1); break;
            case 2: rows<2>(p, i, c, c1); break;
            case 1: rows<1>(p, i, c, c1); break;
            default: break;
        }
    }
}

}  // namespace ct::int8_kernels

#endif
