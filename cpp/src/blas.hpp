// The one place that talks to BLAS directly: blas.cpp declares the CBLAS calls it makes (their symbols
// may carry the library's prefix, scipy_ for the scipy-openblas32 wheel), behind this small interface.
//
// Threads: OpenBLAS itself runs single-threaded; gemm() splits a large product by rows (or
// columns) of C over ct's own thread pool (parallel.hpp), each thread calling the single-threaded
// sgemm on its block. OpenBLAS's pthread workers yield-spin for ~0.1 s after every threaded call
// (22% of all CPU samples of a GPT step go to their sched_yield loop, stealing the second core
// from ct's kernels and from whatever runs next); ct's pool spins 30 us, then sleeps.
// Each C element is computed by the same kernel over the same k blocking either way, so the
// split does not change results.
#pragma once

namespace ct::blas {

// Pins OpenBLAS to one thread (once, after reading its default for the pool: parallel.hpp).
void init();

// C = alpha * op(A) @ op(B) + beta * C, row-major; op(A) is (m, k), op(B) is (k, n).
// Split over the library's threads when large enough.
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc);
// The same on the calling thread only (for callers that already run in parallel, e.g. one
// product per attention head and batch entry).
void gemm_serial(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc);

}  // namespace ct::blas
