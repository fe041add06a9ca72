// C (m, n) = alpha A (m, k) B^T + beta C for 1 <= m <= kFewRows, B (n, k) row-major (a Linear's weight),
// each row of B read once for all m rows (kernels/fp32/few_rows.cpp). blas.cpp routes such products of 1 to
// kFewRows rows here (kernels/split.hpp).
#pragma once
#include <cstddef>

#include "../split.hpp"

namespace ct::blas {

using kernels::kFewRows;
using kernels::kGemvRows;

struct FewRows {
    int m, k;
    float alpha;
    const float* a;
    int lda;
    const float* b;
    int ldb;
    float beta;  // 0: C is only written
    float* c;
    int ldc;
};

// Whether the kernel level has a kernel for it (AVX2 with FMA, or AVX-512); if not, the caller uses the BLAS.
bool few_rows_available();
// Columns [n0, n1) of C.
void few_rows_gemm(const FewRows& p, int n0, int n1);

}  // namespace ct::blas
