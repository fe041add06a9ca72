// The direct small products of blas.cpp (gemm_serial's products of at most kDirectMacs multiply-adds:
// decoding's attention, one query at a time), straight loops instead of a BLAS call, per level (tables.hpp).
#pragma once
#include <cstddef>

#include "tables.hpp"

namespace ct::kernels {

struct SmallGemmLoops {
    // C += alpha op(A) op(B), straight loops (C already scaled by beta): C is m x n (rows ldc apart),
    // op(A) m x k (A, rows lda apart, or its transpose when trans_a), op(B) k x n (B, rows ldb apart, or
    // its transpose when trans_b); row-major as CBLAS's CblasRowMajor.
    void (*gemm_direct)(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                        const float* b, int ldb, float* c, int ldc);
};

CT_LOOP_TABLES(SmallGemmLoops, small_gemm_loops)

}  // namespace ct::kernels
