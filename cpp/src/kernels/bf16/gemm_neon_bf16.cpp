// The aarch64 bf16 kernel (bf16.hpp, "neon_bf16"), for CPUs with ARM's BF16 extension (Graviton3 and 4,
// Neoverse N2/V1/V2, Apple M2 on).
//
// `bfdot acc.4s, w.8h, a.2h[lane]` adds to each of 4 fp32 lanes the dot product of a pair of bf16 weights
// with one pair of a row's bf16 values: 8 multiply-adds, twice an fp32 FMLA's 4. B is packed per panel of 16
// columns as pairs of k (16 columns x 2 values = 64 bytes a pair of k, four vectors of 4 columns), A per row as
// bf16, both padded with zeros to a multiple of 8 values of k, so every load is whole and a padding product is
// 0 x 0. A tile is up to 4 rows x 16 columns: 16 accumulators, 4 weight vectors, 4 row vectors.
//
// The arithmetic is ARM's, not IEEE's: with FPCR.EBF clear (every CPU before ARMv8.7's extended BF16, and
// Linux leaves it clear), BFDOT adds the two exact products of a pair rounding to odd, then adds that to the
// accumulator rounding to odd, with subnormal inputs and outputs flushed to zero. Each addition is then off by
// at most one unit in the last place, not half: the tests hold it to twice the round-to-nearest bound. fp32
// operands are rounded to bf16 by to_bf16 (ties to even, as round_to_bf16) while packed, so they give the same
// products as operands rounded first. Each C element is one chain over k, from 0 or from C: the same bits
// whatever the split over threads.
#include "gemm_kernels.hpp"

#if defined(__aarch64__)
#include <arm_neon.h>

#include <algorithm>
#include <vector>

#define CT_BF16_TARGET __attribute__((target("arch=armv8.6-a+bf16")))

namespace ct::bf16_kernels {

namespace {

constexpr int kColumns = 16;  // a panel of B
constexpr int kStep = 8;      // values of k a row vector holds: 4 pairs, the 4 lanes of BFDOT's broadcast

// op(X)[r][c] as bf16, X fp32 or bf16, row-major with leading dimension ld, transposed or not.
inline bf16_t element(const float* x32, const bf16_t* x16, int ld, bool trans, int r, int c) {
    const std::size_t at = trans ? std::size_t(c) * ld + r : std::size_t(r) * ld + c;
    return x32 ? to_bf16(x32[at]) : x16[at];
}

// Columns [n, n + 16) of op(B) as pairs of k: out[(p * 16 + j) * 2 + h] = op(B)[2p + h][n + j], zero beyond k and n1.
void pack_b(const Block& g, int n, int k_padded, bf16_t* out) {
    std::fill_n(out, std::size_t(k_padded) * kColumns, bf16_t(0));
    const int cols = std::min(kColumns, g.n1 - n);
    for (int kk = 0; kk < g.k; ++kk)
        for (int j = 0; j < cols; ++j)
            out[(std::size_t(kk / 2) * kColumns + j) * 2 + kk % 2] = element(g.b32, g.b16, g.ldb, g.tb, kk, n + j);
}

// Rows [m0, m1) of op(A), each k_padded bf16 values (zero beyond k).
void pack_a(const Block& g, int k_padded, bf16_t* out) {
    for (int i = g.m0; i < g.m1; ++i) {
        bf16_t* row = out + std::size_t(i - g.m0) * k_padded;
        for (int kk = 0; kk < g.k; ++kk) row[kk] = element(g.a32, g.a16, g.lda, g.ta, i, kk);
        std::fill(row + g.k, row + k_padded, bf16_t(0));
    }
}

template <int L>
CT_BF16_TARGET inline void dot_pair(float32x4_t (&acc)[4], const bfloat16x8_t (&w)[4], bfloat16x8_t a) {
    acc[0] = vbfdotq_laneq_f32(acc[0], w[0], a, L);
    acc[1] = vbfdotq_laneq_f32(acc[1], w[1], a, L);
    acc[2] = vbfdotq_laneq_f32(acc[2], w[2], a, L);
    acc[3] = vbfdotq_laneq_f32(acc[3], w[3], a, L);
}

CT_BF16_TARGET inline void load_pair(const bf16_t* b, bfloat16x8_t (&w)[4]) {
    const bfloat16_t* p = reinterpret_cast<const bfloat16_t*>(b);
    w[0] = vld1q_bf16(p);
    w[1] = vld1q_bf16(p + 8);
    w[2] = vld1q_bf16(p + 16);
    w[3] = vld1q_bf16(p + 24);
}

// C rows [i, i + MR) (of the block, A packed from row m0) by the panel's columns [n, n + cols).
template <int MR>
CT_BF16_TARGET void tile(const Block& g, const bf16_t* a, const bf16_t* b, int k_padded, int i, int n, int cols) {
    float32x4_t acc[MR][4];
    float* c[MR];
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
        c[r] = g.c + std::size_t(i + r) * g.ldc + n;
        if (g.accumulate) {  // the chain starts from C
            alignas(16) float start[kColumns] = {};
            std::copy_n(c[r], cols, start);
#pragma GCC unroll 4
            for (int v = 0; v < 4; ++v) acc[r][v] = vld1q_f32(start + 4 * v);
        } else {
            acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = vdupq_n_f32(0.0f);
        }
    }
    const bf16_t* rows[MR];
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) rows[r] = a + std::size_t(i + r - g.m0) * k_padded;
    bfloat16x8_t wv[4];
    for (int kk = 0; kk < k_padded; kk += kStep) {
        bfloat16x8_t av[MR];
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) av[r] = vld1q_bf16(reinterpret_cast<const bfloat16_t*>(rows[r] + kk));
        const bf16_t* bp = b + std::size_t(kk / 2) * kColumns * 2;
        load_pair(bp, wv);
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) dot_pair<0>(acc[r], wv, av[r]);
        load_pair(bp + 32, wv);
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) dot_pair<1>(acc[r], wv, av[r]);
        load_pair(bp + 64, wv);
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) dot_pair<2>(acc[r], wv, av[r]);
        load_pair(bp + 96, wv);
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) dot_pair<3>(acc[r], wv, av[r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
        alignas(16) float out[kColumns];
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) {
            float32x4_t y = acc[r][v];
            if (g.alpha != 1.0f) y = vmulq_f32(y, vdupq_n_f32(g.alpha));  // (alpha != 1 never with accumulate)
            vst1q_f32(out + 4 * v, y);
        }
        std::copy_n(out, cols, c[r]);
    }
}

}  // namespace

CT_BF16_TARGET void neon_bf16_block(const Block& g) {
    if (g.m1 <= g.m0 || g.n1 <= g.n0) return;
    const int k_padded = (g.k + kStep - 1) / kStep * kStep;
    thread_local std::vector<bf16_t> a, b;  // per thread: the block's rows of A, one panel of B
    a.resize(std::size_t(g.m1 - g.m0) * k_padded);
    b.resize(std::size_t(k_padded) * kColumns);
    pack_a(g, k_padded, a.data());
    for (int n = g.n0; n < g.n1; n += kColumns) {
        pack_b(g, n, k_padded, b.data());
        const int cols = std::min(kColumns, g.n1 - n);
        int i = g.m0;
        for (; i + 4 <= g.m1; i += 4) tile<4>(g, a.data(), b.data(), k_padded, i, n, cols);
        switch (g.m1 - i) {
            case 3: tile<3>(g, a.data(), b.data(), k_padded, i, n, cols); break;
            case 2: tile<2>(g, a.data(), b.data(), k_padded, i, n, cols); break;
            case 1: tile<1>(g, a.data(), b.data(), k_padded, i, n, cols); break;
            default: break;
        }
    }
}

}  // namespace ct::bf16_kernels

#endif
