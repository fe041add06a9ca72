#include "blas.hpp"
#include "ctransformer/error.hpp"
#include "ctransformer/threads.hpp"
#include "parallel.hpp"

#include <string>

#include <cblas.h>

namespace ct::blas {

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
    if (m == 0 || n == 0) return;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n,
                k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace ct::blas

namespace ct {

void set_num_threads(int n) {
    if (n < 1) throw ValueError("set_num_threads: n must be >= 1, got " + std::to_string(n));
    openblas_set_num_threads(n);
    parallel::set_threads(n);  // the non-BLAS kernels use as many (parallel.hpp)
}
int get_num_threads() { return openblas_get_num_threads(); }

}  // namespace ct
