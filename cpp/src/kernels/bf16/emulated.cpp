// gemm_bf16 on a CPU without bf16 units ("emulated"): the operands rounded to bf16 and widened back to float32,
// multiplied in float32. Widening is exact (a bf16 is a float32's upper 16 bits) and so is the product of two
// bf16 values in float32, so the result is the bf16 product up to the float32 summation order (bf16.hpp).
//
// How the weight is widened is what costs:
//  - up to kFewRows rows of x W^T (decoding): in registers by the AVX2 kernel below, a 16-bit shift per value of a
//    weight's bf16 copy (a decoding step is bound by reading W, and W is half float32's bytes), or rounded there
//    from float32 (attention's keys, which have no copy).
//  - more rows of x W^T (a prompt, a batch): a block of W's rows at a time into the thread's L2-sized buffer, each
//    block one float32 sgemm. (Whole float32 copies of both operands cost GPT-2's prefill twice float32's
//    time: 340 MB written and page-faulted per forward.)
//  - anything else (training's transposed operands): whole rounded float32 copies of both, one sgemm.
#include <algorithm>
#include <vector>

#include "../../blas.hpp"
#include "../dispatch.hpp"
#include "../split.hpp"
#include "../../runtime/parallel.hpp"
#include "gemm_kernels.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#define CT_WIDEN_AVX2 __attribute__((target("avx2,fma")))
#endif

namespace ct::bf16_kernels {

namespace {

using kernels::kFewRows;
constexpr std::size_t kSplitFewRowsElements = kernels::kSplitWeightBytes / sizeof(bf16_t);
// A block of W widened to float32: 512 KiB (128 rows of 1024, 42 of 3072), an L2's worth on the CPUs we meet.
constexpr std::size_t kBlockFloats = (std::size_t(512) << 10) / sizeof(float);
constexpr int kBlockAlign = 16;   // the block's rows: a multiple of sgemm's column tiles

float rounded(float x) { return from_bf16(to_bf16(x)); }

// Row i of a stored matrix (leading dimension ld), c values from column 0, rounded to bf16 and widened.
void widen_row(const Bf16Operand& x, std::size_t i, int c, float* out) {
    if (x.f32) {
        const float* s = x.f32 + i * std::size_t(x.ld);
        for (int j = 0; j < c; ++j) out[j] = rounded(s[j]);
    } else {
        widen_bf16(x.b16 + i * std::size_t(x.ld), out, std::size_t(c));
    }
}

// op(X) (rows x cols) rounded to bf16 and widened back to fp32, row-major with leading dimension = cols
// or (trans) a copy of X's own layout: either way the same op applies to the copy.
void rounded_copy(const Bf16Operand& x, int rows, int cols, std::vector<float>& out) {
    const int r = x.trans ? cols : rows, c = x.trans ? rows : cols;  // X's own shape
    out.resize(std::size_t(r) * std::size_t(c));
    parallel::parallel_for(std::size_t(r), std::max<std::size_t>(1, 16384 / std::max(c, 1)), [&](std::size_t i0, std::size_t i1) {
        for (std::size_t i = i0; i < i1; ++i) widen_row(x, i, c, out.data() + i * std::size_t(c));
    });
}

void whole_copies(int m, int n, int k, float alpha, const Bf16Operand& a, const Bf16Operand& b, float beta, float* c,
                  int ldc, bool serial) {
    std::vector<float> a32, b32;
    rounded_copy(a, m, k, a32);
    rounded_copy(b, k, n, b32);
    const int lda = a.trans ? m : k, ldb = b.trans ? k : n;
    (serial ? blas::gemm_serial : blas::gemm)(a.trans, b.trans, m, n, k, alpha, a32.data(), lda, b32.data(), ldb, beta, c, ldc);
}

// x W^T, W (n, k) widened kBlockFloats at a time: columns [j0, j1) of C. x: the rounded rows (m, k).
void blocks_of_w(int m, int k, float alpha, const float* x, const Bf16Operand& w, float beta, float* c, int ldc, int j0,
                 int j1, int rows_per_block) {
    thread_local std::vector<float> block;
    block.resize(std::size_t(rows_per_block) * std::size_t(k));
    for (int j = j0; j < j1; j += rows_per_block) {
        const int rows = std::min(rows_per_block, j1 - j);
        for (int r = 0; r < rows; ++r) widen_row(w, std::size_t(j + r), k, block.data() + std::size_t(r) * std::size_t(k));
        blas::gemm_serial(false, true, m, rows, k, alpha, x, k, block.data(), k, beta, c + j, ldc);
    }
}

#if defined(__x86_64__)
CT_WIDEN_AVX2 inline float sum8(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}

// 8 bf16 values widened to float32: each moved to a 32-bit lane's upper half.
CT_WIDEN_AVX2 inline __m256 widen8(const bf16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

// 8 float32 values rounded to bf16 (to nearest, ties to even, as to_bf16) and widened back: a key or value cache's
// rows, which have no bf16 copy. NaN stays NaN (the rounding's carry would make some of them infinity).
CT_WIDEN_AVX2 inline __m256 widen8(const float* p) {
    const __m256 v = _mm256_loadu_ps(p);
    const __m256i u = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), odd)),
                                       _mm256_set1_epi32(int(0xFFFF0000u)));
    return _mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)),
                            _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

inline float widen1(bf16_t w) { return from_bf16(w); }
inline float widen1(float w) { return rounded(w); }

// C[:, j] (M rows) for j in [n0, n1), COLS columns at a time: COLS rows of W stream at once and each load of x
// serves COLS multiply-adds. Each sum runs over 8 lanes, added by halves, then k's last (k mod 8) terms.
template <int M, int COLS, class W>
CT_WIDEN_AVX2 void widened_columns(const float* x, int k, const W* w, int ldw, float alpha, bool accumulate, float* c,
                                   int ldc, int n0, int n1) {
    const int k8 = k & ~7;
    for (int j = n0; j < n1; j += COLS) {
        __m256 acc[M][COLS];
        for (int i = 0; i < M; ++i)
            for (int q = 0; q < COLS; ++q) acc[i][q] = _mm256_setzero_ps();
        const W* wj = w + std::size_t(j) * std::size_t(ldw);
        // The next COLS rows of W, a cache line per step ahead of their loads (this pass reads COLS x 16 bytes a
        // step): the hardware's stream prefetch alone kept two threads at ~17 of 27 GB/s (GPT-2's head).
        const char* ahead = reinterpret_cast<const char*>(wj + std::size_t(COLS) * std::size_t(ldw));
        for (int p = 0; p < k8; p += 8) {
            if (j + 2 * COLS <= n1) _mm_prefetch(ahead + std::size_t(p) * (sizeof(W) * COLS), _MM_HINT_T0);
            __m256 wv[COLS];
            for (int q = 0; q < COLS; ++q) wv[q] = widen8(wj + std::size_t(q) * std::size_t(ldw) + p);
            for (int i = 0; i < M; ++i) {
                const __m256 xv = _mm256_loadu_ps(x + std::size_t(i) * std::size_t(k) + p);
                for (int q = 0; q < COLS; ++q) acc[i][q] = _mm256_fmadd_ps(xv, wv[q], acc[i][q]);
            }
        }
        for (int i = 0; i < M; ++i)
            for (int q = 0; q < COLS; ++q) {
                float s = sum8(acc[i][q]);
                const W* wq = wj + std::size_t(q) * std::size_t(ldw);
                for (int p = k8; p < k; ++p) s += x[std::size_t(i) * std::size_t(k) + p] * widen1(wq[p]);
                float* out = c + std::size_t(i) * std::size_t(ldc) + j + q;
                *out = accumulate ? *out + alpha * s : alpha * s;
            }
    }
}

// Four columns at a time while there are four (two at 3-4 rows, one from 5: the sums fit the 16 registers), then one.
template <int M, class W>
void widened_rows(const float* x, int k, const W* w, int ldw, float alpha, bool accumulate, float* c, int ldc, int n0,
                  int n1) {
    constexpr int COLS = M <= 2 ? 4 : M <= 4 ? 2 : 1;
    const int whole = n0 + (n1 - n0) / COLS * COLS;
    widened_columns<M, COLS>(x, k, w, ldw, alpha, accumulate, c, ldc, n0, whole);
    if (whole < n1) widened_columns<M, 1>(x, k, w, ldw, alpha, accumulate, c, ldc, whole, n1);
}

// W's rows in bf16 (a weight's copy) or float32 (rounded as they are read).
template <class W>
void widened_few_rows(int m, const float* x, int k, const W* w, int ldw, float alpha, bool accumulate, float* c,
                      int ldc, int n0, int n1) {
    using Rows = void (*)(const float*, int, const W*, int, float, bool, float*, int, int, int);
    static constexpr Rows table[] = {widened_rows<1, W>, widened_rows<2, W>, widened_rows<3, W>, widened_rows<4, W>,
                                     widened_rows<5, W>, widened_rows<6, W>, widened_rows<7, W>, widened_rows<8, W>};
    table[m - 1](x, k, w, ldw, alpha, accumulate, c, ldc, n0, n1);
}

bool widening_kernel_available() { return kernels::float_kernel() != kernels::FloatKernel::Blas; }
#else
bool widening_kernel_available() { return false; }
template <class W>
void widened_few_rows(int, const float*, int, const W*, int, float, bool, float*, int, int, int) {}
#endif

}  // namespace

void emulated(int m, int n, int k, float alpha, const Bf16Operand& a, const Bf16Operand& b, float beta, float* c, int ldc,
              bool serial) {
    if (a.trans || !b.trans || k == 0) return whole_copies(m, n, k, alpha, a, b, beta, c, ldc, serial);
    // x W^T: x's rows rounded once, into the calling thread's buffer, which the workers read through xs (in a
    // worker, the name of a thread_local is the worker's own).
    thread_local std::vector<float> buffer;
    buffer.resize(std::size_t(m) * std::size_t(k));
    float* const xs = buffer.data();
    const int threads = serial ? 1 : parallel::threads();
    const auto round_rows = [&](std::size_t i0, std::size_t i1) {
        for (std::size_t i = i0; i < i1; ++i) widen_row(a, i, k, xs + i * std::size_t(k));
    };
    if (threads <= 1) round_rows(0, std::size_t(m));
    else parallel::parallel_for(std::size_t(m), std::max<std::size_t>(1, 16384 / std::size_t(k)),
                                [&](std::size_t i0, std::size_t i1) { round_rows(i0, i1); });

    if (m <= kFewRows && widening_kernel_available()) {
        const bool accumulate = beta != 0.0f;
        const auto columns = [&](int n0, int n1) {
            if (b.b16) widened_few_rows(m, xs, k, b.b16, b.ld, alpha, accumulate, c, ldc, n0, n1);
            else widened_few_rows(m, xs, k, b.f32, b.ld, alpha, accumulate, c, ldc, n0, n1);
        };
        if (threads <= 1 || std::size_t(n) * std::size_t(k) < kSplitFewRowsElements) return columns(0, n);
        parallel::parallel_chunks(std::size_t(n), std::size_t(threads), [&](std::size_t, std::size_t n0, std::size_t n1) {
            columns(int(n0), int(n1));
        });
        return;
    }
    const std::size_t per_block = std::max<std::size_t>(kBlockAlign, kBlockFloats / std::size_t(k) / kBlockAlign * kBlockAlign);
    const int rows_per_block = int(std::min<std::size_t>(per_block, std::size_t(n)));
    const std::size_t blocks = (std::size_t(n) + std::size_t(rows_per_block) - 1) / std::size_t(rows_per_block);
    if (threads <= 1 || blocks < 2 || 2.0 * m * n * k < kernels::kSplitFlops)
        return blocks_of_w(m, k, alpha, xs, b, beta, c, ldc, 0, n, rows_per_block);
    parallel::parallel_chunks(blocks, std::min(blocks, std::size_t(threads)), [&](std::size_t, std::size_t b0, std::size_t b1) {
        blocks_of_w(m, k, alpha, xs, b, beta, c, ldc, int(b0) * rows_per_block,
                    std::min(n, int(b1) * rows_per_block), rows_per_block);
    });
}

}  // namespace ct::bf16_kernels
