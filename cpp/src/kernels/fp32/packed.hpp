// x W^T for decoding's products of many rows (a batch of sentences, or of beams), with W packed once per
// decoding call instead of once per product: sgemm packs its operands on every call, and at batch 32 that
// is a fifth of a float32 beam-search step (the 8000 x 256 output projection is 8 MB). The packing
// (kernels/fp32/packed.cpp) is blocks of 16 outputs, [ceil(n / 16)][k][16] floats, zero past n; the AVX-512 kernel
// keeps up to 6 rows x 64 outputs, or 6-12 rows x 32, in up to 24 accumulators (the AVX2 one 6 rows x 16 outputs in 12), one fused
// multiply-add per row, output and value of k, in order over k: another legal summation order than the
// BLAS's, within the same float32 bound (tests/runtime/test_blas.py), and the same in both kernels.
// kernels/weight_cache.hpp holds the copies while a ct::decode::PackedWeights region lasts.
#pragma once
#include "ctransformer/runtime/allocator.hpp"
#include "few_rows.hpp"

namespace ct::blas {

using kernels::kPackedMaxRows;  // (kernels/split.hpp)
using kernels::kPackedMinRows;

// The copy's floats come from the tensors' caching allocator (allocator.hpp), not the system: a decoding call
// packs its weights afresh, and a fresh 8 MB copy from the system costs ~2000 page faults (~3 ms for the 8000 x
// 256 projection, 15-30 products of a few rows); from the cache, the next call's copy costs its writes alone.
struct PackedWeight {
    int n = 0, k = 0;
    CachedArray<float> data;  // not value-initialised: pack_weight writes every float
};

// Whether the kernel level has a kernel (AVX-512F, or AVX2 and FMA; kernels/dispatch.hpp).
bool packed_available();
// W (n, k) row-major, leading dimension ldw, into `out`; round_bf16: its values rounded to bf16 (emulated bf16's
// operands, kernels/bf16/emulated.cpp).
void pack_weight(const float* w, int n, int k, int ldw, PackedWeight& out, bool round_bf16 = false);
// Columns [n0, n1) of C (m, n) = alpha x W^T, plus C when `accumulate`; n0 a multiple of 16.
void packed_gemm(int m, const float* x, int ldx, const PackedWeight& w, float alpha, bool accumulate, float* c,
                 int ldc, int n0, int n1);

}  // namespace ct::blas
