// Inside gemm_bf16: one block of C for one thread, and the kernels that compute it.
#pragma once
#include <cstddef>
#include <cstdint>

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

// Any CPU (kernels/bf16/emulated.cpp): C = alpha op(A) op(B) + beta C (beta 0 or 1) in float32 on the operands
// rounded to bf16; serial: on the calling thread alone.
void emulated(int m, int n, int k, float alpha, const Bf16Operand& a, const Bf16Operand& b, float beta, float* c, int ldc,
              bool serial);
// CPUs with AVX512_BF16 only. shared_a: A already packed for every row (pack_shared_a), else each call packs
// its own blocks of A.
void avx512_bf16_block(const Block& block, const std::uint32_t* shared_a = nullptr);
// Up to kFewRows rows of C (kernels/split.hpp), A not transposed and B transposed (B[n][k]: a weight), without
// packing; its own order of summation (bf16.hpp). alpha != 1 scales the sum; accumulate adds it to C.
void avx512_bf16_few_rows(const Block& block);
// CPUs with AMX-BF16 (the "amx" level): any block, each call packing its own blocks of A and B. Callable only once
// amx_bf16_permitted(): Linux granted this process the tile state (asked for on the first call).
void amx_bf16_block(const Block& block);
bool amx_bf16_permitted();
// CPUs with ARM's BF16 (aarch64): any block, each call packing its own rows of A and panels of B.
void neon_bf16_block(const Block& block);
// A packed once for all threads: the buffer's size in 32-bit words, and packing rows [12 panel0, 12 panel1)
// of it (threads pack disjoint panels). block.m0 must be 0 and block.m1 = m.
std::size_t avx512_bf16_shared_a_words(int m, int k);
void avx512_bf16_pack_shared_a(const Block& block, int panel0, int panel1, std::uint32_t* out);

}  // namespace ct::bf16_kernels
