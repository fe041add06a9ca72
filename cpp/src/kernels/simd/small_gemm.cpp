// small_gemm.hpp's loops, for one level (tables.hpp).
#include "small_gemm.hpp"

#include "per_level.hpp"

namespace ct::kernels {
namespace CT_LOOP_LEVEL {

namespace {

// C's row (n <= NV W floats) += sum over p of (alpha a[p * a_step]) B[p], in registers across p (decoding's
// attention: one query's weights times one head's values, n = d_v): no load and store of C per p. NV and
// FULL (n = NV W) are constants, so no accumulator is indexed at run time (GCC then keeps them in memory)
// and no mask is chosen inside the loop.
template <std::size_t NV, bool FULL>
void row_times_rows(int n, int k, float alpha, const float* a, std::size_t a_step, const float* b, int ldb, float* ci) {
    simd::B cr[NV];
    const std::size_t last = std::size_t(n) - (NV - 1) * simd::W;  // lanes of the last vector
    const auto load = [&](const float* p, std::size_t v) {
        return FULL || v + 1 < NV ? simd::B::load_unaligned(p) : simd::load(p, last);
    };
#pragma GCC unroll 8
    for (std::size_t v = 0; v < NV; ++v) cr[v] = load(ci + v * simd::W, v);
    for (int p = 0; p < k; ++p) {
        const simd::B aip(alpha * a[std::size_t(p) * a_step]);
        const float* bp = b + std::size_t(p) * std::size_t(ldb);
#pragma GCC unroll 8
        for (std::size_t v = 0; v < NV; ++v) cr[v] = cr[v] + aip * load(bp + v * simd::W, v);
    }
#pragma GCC unroll 8
    for (std::size_t v = 0; v < NV; ++v) simd::store(ci + v * simd::W, cr[v], FULL || v + 1 < NV ? simd::W : last);
}

template <std::size_t NV>
void row_times_rows(int n, int k, float alpha, const float* a, std::size_t a_step, const float* b, int ldb, float* ci) {
    if (std::size_t(n) == NV * simd::W)
        row_times_rows<NV, true>(n, k, alpha, a, a_step, b, ldb, ci);
    else
        row_times_rows<NV, false>(n, k, alpha, a, a_step, b, ldb, ci);
}

// ci[j + l] += alpha <ai, B[j + l]> for the r <= W columns l < r from j: their W sums reduced together
// (simd::sums_of, a transposing tree) instead of one horizontal sum each (decoding's attention scores:
// one query against each key of a head). Columns past r repeat the last one, and are not stored.
void dots_of_rows(int r, int k, float alpha, const float* ai, const float* bj, int ldb, float* ci) {
    const float* row[simd::W];
    const std::size_t last_column = std::size_t(r) - 1;
    for (std::size_t l = 0; l < simd::W; ++l) row[l] = bj + (l < last_column ? l : last_column) * std::size_t(ldb);
    simd::B acc[simd::W];
#pragma GCC unroll 16
    for (std::size_t l = 0; l < simd::W; ++l) acc[l] = simd::B(0.0f);
    simd::blocks(std::size_t(k), [&](std::size_t p, std::size_t cnt) {
        const simd::B x = simd::load(ai + p, cnt);
#pragma GCC unroll 16
        for (std::size_t l = 0; l < simd::W; ++l) acc[l] += x * simd::load(row[l] + p, cnt);
    });
    simd::store(ci, simd::load(ci, std::size_t(r)) + simd::B(alpha) * simd::sums_of(acc), std::size_t(r));
}

// C += alpha op(A) op(B), straight loops (C already scaled by beta).
void gemm_direct(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float* c, int ldc) {
    const auto A = [&](int i, int p) { return trans_a ? a[std::size_t(p) * lda + i] : a[std::size_t(i) * lda + p]; };
    for (int i = 0; i < m; ++i) {
        float* ci = c + std::size_t(i) * std::size_t(ldc);
        if (!trans_b && std::size_t(n) <= 8 * simd::W) {
            // row i of op(A): a row of A, or (trans_a) a column, lda apart
            const float* ar = trans_a ? a + i : a + std::size_t(i) * std::size_t(lda);
            const std::size_t step = trans_a ? std::size_t(lda) : 1;
            switch ((std::size_t(n) + simd::W - 1) / simd::W) {
                case 1: row_times_rows<1>(n, k, alpha, ar, step, b, ldb, ci); break;
                case 2: row_times_rows<2>(n, k, alpha, ar, step, b, ldb, ci); break;
                case 3: row_times_rows<3>(n, k, alpha, ar, step, b, ldb, ci); break;
                case 4: row_times_rows<4>(n, k, alpha, ar, step, b, ldb, ci); break;
                // a head of 64 values is 8 vectors at AVX2 (4 at AVX-512): still in registers
                case 5: row_times_rows<5>(n, k, alpha, ar, step, b, ldb, ci); break;
                case 6: row_times_rows<6>(n, k, alpha, ar, step, b, ldb, ci); break;
                case 7: row_times_rows<7>(n, k, alpha, ar, step, b, ldb, ci); break;
                default: row_times_rows<8>(n, k, alpha, ar, step, b, ldb, ci); break;
            }
        } else if (!trans_b) {  // C[i] += (alpha A[i, p]) B[p], over the contiguous rows of B
            for (int p = 0; p < k; ++p) {
                const simd::B aip(alpha * A(i, p));
                const float* bp = b + std::size_t(p) * std::size_t(ldb);
                simd::blocks(std::size_t(n), [&](std::size_t j, std::size_t cnt) {
                    simd::store(ci + j, simd::load(ci + j, cnt) + aip * simd::load(bp + j, cnt), cnt);
                });
            }
        } else if (!trans_a) {  // C[i, j] += alpha <A[i], B[j]>, both rows contiguous
            const float* ai = a + std::size_t(i) * std::size_t(lda);
            int j = 0;
            // Columns W at a time, and a last group of at least W/4 (fewer go one by one: a group's
            // reduction costs about W/4 single sums).
            for (; n - j >= int(simd::W) / 4 && n - j >= 2; j += int(simd::W))
                dots_of_rows(n - j < int(simd::W) ? n - j : int(simd::W), k, alpha, ai,
                             b + std::size_t(j) * std::size_t(ldb), ldb, ci + j);
            for (; j < n; ++j) {
                const float* bj = b + std::size_t(j) * std::size_t(ldb);
                simd::B acc(0.0f);
                simd::blocks(std::size_t(k), [&](std::size_t p, std::size_t cnt) {
                    acc += simd::load(ai + p, cnt) * simd::load(bj + p, cnt);
                });
                ci[j] += alpha * simd::hsum(acc);
            }
        } else {
            for (int j = 0; j < n; ++j) {
                const float* bj = b + std::size_t(j) * std::size_t(ldb);
                float acc = 0.0f;
                for (int p = 0; p < k; ++p) acc += A(i, p) * bj[p];
                ci[j] += alpha * acc;
            }
        }
    }
}

}  // namespace
}  // namespace CT_LOOP_LEVEL

CT_LOOP_TABLE(SmallGemmLoops, small_gemm_loops) = {CT_LOOP_LEVEL::gemm_direct};
CT_LOOP_SELECT(SmallGemmLoops, small_gemm_loops)

}  // namespace ct::kernels
