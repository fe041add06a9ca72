// The aarch64 int8 kernel for CPUs without SDOT (ARMv8.0: Cortex-A53/A72, a Raspberry Pi 4, Graviton1): plain
// NEON, which every aarch64 CPU has.
//
// Without a dot product the bytes are widened by multiplying: SMULL multiplies 8 signed bytes by 8 into int16,
// SMLAL adds 8 more products to them, and SADALP adds adjacent int16 pairs into int32 accumulators. A 16-byte
// weight vector of the packed layout (int8.hpp) is 4 outputs x 4 values of k; its low half (outputs 0-1) and its
// high half (outputs 2-3) each meet the row's group of 4 values broadcast twice. Two groups of k go into one int16
// before it is widened: |q_x w| <= 128 x 127, so two products stay within int16 (2 x 16,256 < 32,768; a weight is
// never -128 and an activation of -128 fits too). Each int16 then holds one output's products at one position j of
// two groups, and SADALP pairs j = 0, 1 and j = 2, 3; a final ADDP of the two halves' accumulators gives the 4
// outputs' sums. 6 instructions per 32 multiply-adds, exact: the same int32 sums as every other kernel, and the
// portable epilogue (neon_store.hpp).
//
// A tile is 2 rows x 16 columns: 16 accumulators, a weight vector of each of two groups at a time and the rows'
// 2 groups, of the 32 registers.
#include "kernels.hpp"

#if defined(__aarch64__)
#include <arm_neon.h>

#include <algorithm>

#include "neon_store.hpp"

namespace ct::int8_kernels {

namespace {

// One row's group g of 4 values, four times: its low and high halves each meet a weight half (2 outputs x 4 values),
// the high one through SMULL2/SMLAL2, which need no copy of the weight's high half.
inline int8x16_t group_of(const std::int8_t* a, std::size_t g) {
    std::int32_t four;
    __builtin_memcpy(&four, a + 4 * g, 4);
    return vreinterpretq_s8_s32(vdupq_n_s32(four));
}

// Rows [row, row + MR) of the product for the 16 columns from n (a multiple of 16); cnt of them are kept.
template <int MR>
void tile(const Problem& p, std::size_t row, std::size_t n, std::size_t cnt) {
    const Int8Weight& w = *p.w;
    const std::size_t kg = w.k_groups();
    const std::int8_t* b = w.packed.data() + (n / 16) * kg * 64;
    const std::int8_t* a[MR];
    int32x4_t acc[MR][4][2];   // [row][weight vector: outputs 4v..4v+3][half: outputs 0-1, 2-3 of the four]
#pragma GCC unroll 2
    for (int r = 0; r < MR; ++r) {
        a[r] = p.qx + (row + r) * p.lda;
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) acc[r][v][0] = acc[r][v][1] = vdupq_n_s32(0);
    }
    std::size_t g = 0;
    for (; g + 2 <= kg; g += 2) {   // two groups into each int16, then widened
        int8x16_t x0[MR], x1[MR];
#pragma GCC unroll 2
        for (int r = 0; r < MR; ++r) x0[r] = group_of(a[r], g), x1[r] = group_of(a[r], g + 1);
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) {
            const int8x16_t w0 = vld1q_s8(b + g * 64 + 16 * v), w1 = vld1q_s8(b + (g + 1) * 64 + 16 * v);
#pragma GCC unroll 2
            for (int r = 0; r < MR; ++r) {
                const int16x8_t lo = vmlal_s8(vmull_s8(vget_low_s8(w0), vget_low_s8(x0[r])), vget_low_s8(w1),
                                              vget_low_s8(x1[r]));
                const int16x8_t hi = vmlal_high_s8(vmull_high_s8(w0, x0[r]), w1, x1[r]);
                acc[r][v][0] = vpadalq_s16(acc[r][v][0], lo);
                acc[r][v][1] = vpadalq_s16(acc[r][v][1], hi);
            }
        }
    }
    if (g < kg) {   // an odd last group alone
        int8x16_t x0[MR];
#pragma GCC unroll 2
        for (int r = 0; r < MR; ++r) x0[r] = group_of(a[r], g);
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) {
            const int8x16_t w0 = vld1q_s8(b + g * 64 + 16 * v);
#pragma GCC unroll 2
            for (int r = 0; r < MR; ++r) {
                acc[r][v][0] = vpadalq_s16(acc[r][v][0], vmull_s8(vget_low_s8(w0), vget_low_s8(x0[r])));
                acc[r][v][1] = vpadalq_s16(acc[r][v][1], vmull_high_s8(w0, x0[r]));
            }
        }
    }
    const TileScales<4> scales(p, n, cnt);
#pragma GCC unroll 2
    for (int r = 0; r < MR; ++r) {
        // [o0 j01, o0 j23, o1 j01, o1 j23] and the same for o2, o3: pairwise, the four outputs' sums in order.
        int32x4_t sums[4];
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) sums[v] = vpaddq_s32(acc[r][v][0], acc[r][v][1]);
        store_row(p, row + r, n, cnt, sums, scales.ws, scales.bias);
    }
}

template <int MR>
void rows(const Problem& p, std::size_t row, std::size_t n0, std::size_t n1) {
    for (std::size_t n = n0; n < n1; n += 16) tile<MR>(p, row, n, std::min<std::size_t>(16, n1 - n));
}

}  // namespace

void neon(const Problem& p, std::size_t n0, std::size_t n1) {
    // Column panels of 64 outermost, so one panel of the weight (64 x k bytes) stays in cache for every row.
    for (std::size_t c = n0; c < n1; c += 64) {
        const std::size_t c1 = std::min(n1, c + 64);
        std::size_t i = 0;
        for (; i + 2 <= p.m; i += 2) rows<2>(p, i, c, c1);
        if (i < p.m) rows<1>(p, i, c, c1);
    }
}

}  // namespace ct::int8_kernels

#endif
