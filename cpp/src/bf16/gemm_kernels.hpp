// Inside gemm_bf16: one block of C for one thread, and the kernels that compute it.
#pragma once
#include "ctransformer/bf16.hpp"

namespace ct::bf16_kernels {

// C[m0:m1, n0:n1] = alpha op(A) op(B) (+ C when accumulate) over all k. Exactly one of a32/a16 (and of
// b32/b16) is set. alpha != 1 comes only with accumulate false.
struct Block {
    const float* a32;
    const bf16_t* a16;
    int lda;
    bool ta;
    const float* b32;
    const bf16_t* b16;
    int ldb;
    bool tb;
    float* c;
    int ldc;
    int m0, m1, n0, n1, k;
    float alpha;
    bool accumulate;
};

void avx512_bf16_block(const Block& block);  // CPUs with AVX512_BF16 only

}  // namespace ct::bf16_kernels
