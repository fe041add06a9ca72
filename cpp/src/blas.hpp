// The one place that talks to BLAS directly. OpenBLAS's <cblas.h> clashes with xtensor-blas's
// declarations, so it is included only in blas.cpp, behind this small interface.
#pragma once

namespace ct::blas {

// C = alpha * op(A) @ op(B) + beta * C, row-major; op(A) is (m, k), op(B) is (k, n).
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc);

}  // namespace ct::blas
