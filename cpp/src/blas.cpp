#include "blas.hpp"
#include "ctransformer/error.hpp"
#include "ctransformer/threads.hpp"
#include "parallel.hpp"
#include "simd.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>

#include <cblas.h>

namespace ct::blas {

// Once: ct's thread count starts as OpenBLAS's own default (OPENBLAS_NUM_THREADS or the cores),
// and OpenBLAS is then told to use one thread; the splitting happens here instead.
void init() {
    static std::once_flag once;
    std::call_once(once, [] {
        parallel::set_default_threads(openblas_get_num_threads());
        openblas_set_num_threads(1);
    });
}

namespace {

// Below ~4 MFLOP (~40 us on one core) a product stays on one thread: handing half of it to the
// other thread costs a few us, and on a loaded machine a worker that was preempted holding a piece
// costs a scheduler tick (measured: the tiny model's step ran faster single-threaded).
constexpr double kSplitFlops = 2.0 * 128 * 128 * 128;
constexpr int kMinBlock = 32;                        // rows (or columns) per piece at least
// Pieces per thread: 2 lets the caller take over half of a descheduled worker's share; more
// would pack B (or A) once more per piece.
constexpr std::size_t kPiecesPerThread = 2;
// Up to this many rows of C a product is that many sgemv calls: sgemm packs all of B first, which
// for one row of a decoding step costs ~4.6x the product (8000x256 weight: 888 us vs 191 us; equal
// at 4 rows), so incremental decoding at batch 1 would be bound by packing.
constexpr int kGemvRows = 2;
constexpr std::size_t kSplitGemvElements = std::size_t(1) << 16;

// Products up to this many multiply-adds skip BLAS: a call costs 0.2-1 us before any work, and an
// incremental decoding step's attention is hundreds of 1 x len x d_k products per layer (tiny model:
// 4 heads x 32 rows, len <= 50, d_k 8), which spent most of the step in call overhead.
constexpr std::size_t kDirectMacs = 8192;

// C += alpha op(A) op(B), straight loops (C already scaled by beta).
void gemm_direct(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float* c, int ldc) {
    const auto A = [&](int i, int p) { return trans_a ? a[std::size_t(p) * lda + i] : a[std::size_t(i) * lda + p]; };
    for (int i = 0; i < m; ++i) {
        float* ci = c + std::size_t(i) * std::size_t(ldc);
        if (!trans_b) {  // C[i] += (alpha A[i, p]) B[p], over the contiguous rows of B
            for (int p = 0; p < k; ++p) {
                const simd::B aip(alpha * A(i, p));
                const float* bp = b + std::size_t(p) * std::size_t(ldb);
                simd::blocks(std::size_t(n), [&](std::size_t j, std::size_t cnt) {
                    simd::store(ci + j, simd::load(ci + j, cnt) + aip * simd::load(bp + j, cnt), cnt);
                });
            }
        } else if (!trans_a) {  // C[i, j] += alpha <A[i], B[j]>, both rows contiguous
            const float* ai = a + std::size_t(i) * std::size_t(lda);
            for (int j = 0; j < n; ++j) {
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

void gemm_serial(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc) {
    if (m == 0 || n == 0) return;
    if (beta == 0.0f) {
        // OpenBLAS 0.3.21's beta = 0 pass (sgemm_beta) is slow: a 400x32x32 product took 30 us with
        // it and 13 us as memset + beta = 1 (50x50x8: 1.7 vs 1.1 us; equal for large products).
        if (ldc == n)
            std::memset(c, 0, sizeof(float) * std::size_t(m) * std::size_t(n));
        else  // rows of a wider matrix (an attention head's columns): short rows, no call per row
            for (int i = 0; i < m; ++i) std::fill_n(c + std::size_t(i) * std::size_t(ldc), n, 0.0f);
        beta = 1.0f;
    }
    if (std::size_t(m) * std::size_t(n) * std::size_t(k) <= kDirectMacs) {
        if (beta != 1.0f)
            for (int i = 0; i < m; ++i)
                for (int j = 0; j < n; ++j) c[std::size_t(i) * std::size_t(ldc) + j] *= beta;
        return gemm_direct(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, c, ldc);
    }
    if (m <= kGemvRows && k > 0) {
        // One row of C per sgemv: C[i] = alpha * op(B)^T-row-product + C[i]. Row i of op(A) is a row
        // of A, or (trans_a) a column of A with stride lda.
        for (int i = 0; i < m; ++i) {
            const float* x = trans_a ? a + i : a + std::size_t(i) * std::size_t(lda);
            if (trans_b)  // B is (n, k): C[i] = B x
                cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, alpha, b, ldb, x, trans_a ? lda : 1, beta,
                            c + std::size_t(i) * std::size_t(ldc), 1);
            else          // B is (k, n): C[i] = B^T x
                cblas_sgemv(CblasRowMajor, CblasTrans, k, n, alpha, b, ldb, x, trans_a ? lda : 1, beta,
                            c + std::size_t(i) * std::size_t(ldc), 1);
        }
        return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n,
                k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
    init();
    if (m == 0 || n == 0) return;
    const std::size_t threads = std::size_t(parallel::threads());
    // sgemv rows are bound by reading B, not by arithmetic: two threads reading halves of a weight of
    // 256 KiB or more beat one (every Linear of the small model's decoding step at batch 1: 23.4 ->
    // 21.0 ms for 50 tokens when the 256 x 256 projections were split too).
    const bool gemv_worth_splitting = m <= kGemvRows && std::size_t(n) * std::size_t(k) >= kSplitGemvElements;
    if (threads <= 1 || (2.0 * m * n * k < kSplitFlops && !gemv_worth_splitting) ||
        (m < 2 * kMinBlock && n < 2 * kMinBlock))
        return gemm_serial(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (m >= 2 * kMinBlock) {  // rows of C: rows of op(A)
        parallel::parallel_for(std::size_t(m), kMinBlock, [&](std::size_t i0, std::size_t i1) {
            const float* ai = trans_a ? a + i0 : a + i0 * std::size_t(lda);
            gemm_serial(trans_a, trans_b, int(i1 - i0), n, k, alpha, ai, lda, b, ldb, beta, c + i0 * std::size_t(ldc), ldc);
        }, kPiecesPerThread);
    } else {  // columns of C: columns of op(B)
        parallel::parallel_for(std::size_t(n), kMinBlock, [&](std::size_t j0, std::size_t j1) {
            const float* bj = trans_b ? b + j0 * std::size_t(ldb) : b + j0;
            gemm_serial(trans_a, trans_b, m, int(j1 - j0), k, alpha, a, lda, bj, ldb, beta, c + j0, ldc);
        }, kPiecesPerThread);
    }
}

}  // namespace ct::blas

namespace ct {

void set_num_threads(int n) {
    if (n < 1) throw ValueError("set_num_threads: n must be >= 1, got " + std::to_string(n));
    // Each thread beyond the first is a pool worker started on the next parallel op: a hostile
    // n (10**6) would exhaust the process's threads there, far from the call that asked for it.
    if (n > 1024) throw ValueError("set_num_threads: n must be at most 1024, got " + std::to_string(n));
    blas::init();
    parallel::set_threads(n);  // BLAS products and the kernels alike (parallel.hpp)
}
int get_num_threads() {
    blas::init();
    return parallel::threads();
}

}  // namespace ct
