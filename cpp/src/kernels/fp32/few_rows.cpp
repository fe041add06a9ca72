// x W^T for a few rows of x (a decoding step: one row per sentence, or per hypothesis of a beam), with W
// (n, k) row-major read once for all the rows. sgemm packs all of W first, which for a decoding step costs
// several times the product itself (8000 x 256 output projection: ~890 us against ~190 us for one sgemv
// at one row), and m sgemv calls read W m times. blas.cpp sends
// 1 to kFewRows rows here (kernels/split.hpp).
//
// Each output is a dot product over k in 16 (AVX-512) or 8 (AVX2) lanes of fused multiply-adds, the lanes
// then added by halves: another legal summation order than the BLAS's, within the same float32 bound
// (tests/runtime/test_blas.py). Compiled with function target attributes and taken only when the CPU has
// the instructions; elsewhere few_rows_available() is false and the caller uses the BLAS.
#include "few_rows.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "../dispatch.hpp"

#if defined(__x86_64__)
// GCC 12's AVX-512 headers start some intrinsics from an "undefined" vector (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#define CT_FEW_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,fma")))
#define CT_FEW_AVX2 __attribute__((target("avx2,fma")))

namespace ct::blas {

namespace {

CT_FEW_AVX2 inline float sum8(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}

CT_FEW_AVX512 inline float sum16(__m512 v) {
    const __m256 lo = _mm512_castps512_ps256(v);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(_mm256_add_ps(lo, hi)), _mm256_extractf128_ps(_mm256_add_ps(lo, hi), 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}

inline void store(float* c, float s, float alpha, float beta) { *c = beta == 0.0f ? alpha * s : alpha * s + beta * *c; }

// AVX2: columns [n0, n1), COLS at a time: each load of a row of x serves COLS columns, and COLS rows of W stream at once.
// The product is bound by reading W; COLS independent sums keep the loads in flight where one column at a time
// waits on each sum's multiply-add latency. Whole vectors of k are plain-loaded and only the last k mod 8 (AVX-512's
// kernel below: 16) values masked (a masked load in every step cost 3.5x at 8 rows: 73 against 21 ms a GPT-2 step). The next COLS
// rows of W are prefetched one step ahead of their use: the stream prefetcher alone left a third of the read
// bandwidth unused on GPT-2's 50257 x 768 vocabulary projection.
template <int M, int COLS>
CT_FEW_AVX2 void columns_avx2(const FewRows& p, int n0, int n1) {
    const int k = p.k, k8 = k & ~7;
    const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32(k - k8), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const std::size_t ldb = std::size_t(p.ldb), lda = std::size_t(p.lda);
    for (int j = n0; j < n1; j += COLS) {
        __m256 acc[M][COLS];
        for (int i = 0; i < M; ++i)
            for (int c = 0; c < COLS; ++c) acc[i][c] = _mm256_setzero_ps();
        const float* w = p.b + std::size_t(j) * ldb;
        // The next block's rows, contiguous when ldb == k (a weight); 32 * COLS bytes of them a step.
        const char* ahead = j + 2 * COLS <= n1 ? reinterpret_cast<const char*>(w + COLS * ldb) : nullptr;
        for (int q = 0; q < k8; q += 8) {
            if (ahead)
                for (int line = 0; line < (32 * COLS + 63) / 64; ++line)
                    _mm_prefetch(ahead + std::size_t(q) * 4 * COLS + 64 * line, _MM_HINT_T0);
            __m256 b[COLS];
            for (int c = 0; c < COLS; ++c) b[c] = _mm256_loadu_ps(w + std::size_t(c) * ldb + q);
            for (int i = 0; i < M; ++i) {
                const __m256 x = _mm256_loadu_ps(p.a + std::size_t(i) * lda + q);
                for (int c = 0; c < COLS; ++c) acc[i][c] = _mm256_fmadd_ps(x, b[c], acc[i][c]);
            }
        }
        if (k8 < k)
            for (int c = 0; c < COLS; ++c) {
                const __m256 b = _mm256_maskload_ps(w + std::size_t(c) * ldb + k8, tail);
                for (int i = 0; i < M; ++i)
                    acc[i][c] = _mm256_fmadd_ps(_mm256_maskload_ps(p.a + std::size_t(i) * lda + k8, tail), b, acc[i][c]);
            }
        for (int i = 0; i < M; ++i)
            for (int c = 0; c < COLS; ++c) store(p.c + std::size_t(i) * std::size_t(p.ldc) + j + c, sum8(acc[i][c]), p.alpha, p.beta);
    }
}

// AVX-512: one row of W at a time, read front to back, so W streams as one sequence of addresses. Four rows at a
// time (as AVX2 does) read four sequences 4k bytes apart, and the memory serves that worse: GPT-2's float32 step
// at batch 1 took 19.4-19.8 ms against 16.4-17.4 (three alternated pairs, 2 threads, Xeon with AVX-512; each product
// of the step 12-24% faster, the 768 x 3072 ones most), batch 2 20.8-22.5 against 17.7-18.2. One column's sum is a
// chain of multiply-adds, a vector of 16 values each (64 bytes every FMA latency): fast enough for memory, where
// AVX2's 8 values are not (the same change there was 7% slower on the same CPU). The per-column sums are the same
// as before, so are the bits. The next row is prefetched a line a step ahead of its use.
template <int M>
CT_FEW_AVX512 void columns_avx512(const FewRows& p, int n0, int n1) {
    const int k = p.k, k16 = k & ~15;
    const __mmask16 tail = __mmask16((1u << (k - k16)) - 1u);
    const std::size_t ldb = std::size_t(p.ldb), lda = std::size_t(p.lda);
    for (int j = n0; j < n1; ++j) {
        __m512 acc[M];
        for (int i = 0; i < M; ++i) acc[i] = _mm512_setzero_ps();
        const float* w = p.b + std::size_t(j) * ldb;
        const char* ahead = j + 2 <= n1 ? reinterpret_cast<const char*>(w + ldb) : nullptr;
        for (int q = 0; q < k16; q += 16) {
            if (ahead) _mm_prefetch(ahead + std::size_t(q) * 4, _MM_HINT_T0);
            const __m512 b = _mm512_loadu_ps(w + q);
            for (int i = 0; i < M; ++i) acc[i] = _mm512_fmadd_ps(_mm512_loadu_ps(p.a + std::size_t(i) * lda + q), b, acc[i]);
        }
        if (k16 < k) {
            const __m512 b = _mm512_maskz_loadu_ps(tail, w + k16);
            for (int i = 0; i < M; ++i)
                acc[i] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, p.a + std::size_t(i) * lda + k16), b, acc[i]);
        }
        for (int i = 0; i < M; ++i) store(p.c + std::size_t(i) * std::size_t(p.ldc) + j, sum16(acc[i]), p.alpha, p.beta);
    }
}

// M rows: four columns at a time for one or two rows (a decoding step at batch 1 or 2), two up to four rows, then
// one (AVX2's 16 registers: at most 8 sums beside the loads), the last columns one at a time.
template <int M>
constexpr int kColumns = M <= 2 ? 4 : M <= 4 ? 2 : 1;

template <int M>
CT_FEW_AVX2 void rows_avx2(const FewRows& p, int n0, int n1) {
    const int whole = n0 + (n1 - n0) / kColumns<M> * kColumns<M>;
    columns_avx2<M, kColumns<M>>(p, n0, whole);
    if (whole < n1) columns_avx2<M, 1>(p, whole, n1);
}

template <int M>
CT_FEW_AVX512 void rows_avx512(const FewRows& p, int n0, int n1) {
    columns_avx512<M>(p, n0, n1);
}

template <void (*...F)(const FewRows&, int, int)>
void by_rows(const FewRows& p, int n0, int n1) {
    static constexpr void (*table[])(const FewRows&, int, int) = {F...};
    table[p.m - 1](p, n0, n1);
}

}  // namespace

// The kernel level's choice (kernels/dispatch.hpp).
bool few_rows_available() { return kernels::float_kernel() != kernels::FloatKernel::Blas; }

void few_rows_gemm(const FewRows& p, int n0, int n1) {
    if (kernels::float_kernel() == kernels::FloatKernel::Avx512)
        by_rows<rows_avx512<1>, rows_avx512<2>, rows_avx512<3>, rows_avx512<4>, rows_avx512<5>, rows_avx512<6>,
                rows_avx512<7>, rows_avx512<8>>(p, n0, n1);
    else
        by_rows<rows_avx2<1>, rows_avx2<2>, rows_avx2<3>, rows_avx2<4>, rows_avx2<5>, rows_avx2<6>, rows_avx2<7>,
                rows_avx2<8>>(p, n0, n1);
}

}  // namespace ct::blas

#else

namespace ct::blas {
bool few_rows_available() { return false; }
void few_rows_gemm(const FewRows&, int, int) {}
}  // namespace ct::blas

#endif
