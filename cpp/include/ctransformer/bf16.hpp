// bfloat16: fp32's sign and exponent with 7 bits of mantissa, and the products that use it.
//
// Rounding is round-to-nearest-even, as torch's (c10::BFloat16): a NaN becomes the quiet NaN 0x7FC0,
// subnormals are kept. A bf16 value is held as its 16 bits (uint16_t).
//
// gemm_bf16 multiplies operands rounded to bf16 and accumulates in fp32. An operand is either fp32
// (rounded to bf16 while the kernel packs it, so no rounded copy is made) or already bf16 (a cached
// weight). These kernels compute it:
//   - "avx512_bf16": vdpbf16ps, two bf16 multiply-adds per fp32 lane, twice the fp32 FMA rate. Each
//     C element is one fp32 chain over k in pairs: acc += a[2p+1] b[2p+1], then acc += a[2p] b[2p]
//     (each product is exact in fp32, each addition rounds to nearest even; subnormal inputs and
//     results are flushed to zero, as the instruction does), starting from 0, or from C when beta is 1.
//     Products of at most 8 rows with B transposed (decoding: x W^T, one row per sentence) skip packing and
//     sum in another order: lane j of a 16-lane accumulator chains over the k pairs p = j mod 16 in
//     order (the same two additions per pair), then the lanes are added by halves (lane i + lane i+8,
//     then + i+4, + i+2, + i+1); the sum is scaled by alpha, then added to C when beta is 1.
//   - "amx_bf16", on x86-64 CPUs with Intel's AMX-BF16 (the "amx" kernel level): products of more than 8 rows in
//     tiles, each C element one fp32 chain over k in steps of 32 values from 0 or from C, each step adding 32
//     exact products in the hardware's order (Intel documents round to nearest even, subnormal inputs and results
//     flushed to zero), then scaled by alpha; so within float32's summation bound, not a bit-exact model.
//     Products of at most 8 rows with B transposed take the AVX512_BF16 kernel's few-rows path above.
//   - "neon_bf16", on aarch64 CPUs with ARM's BF16: bfdot, two bf16 multiply-adds per fp32 lane. Each C element
//     is one chain over k in pairs from 0 or from C; each pair's two exact products are added, then added to
//     the chain, each addition rounding to odd (FPCR.EBF clear: ARM's BF16 arithmetic, not IEEE's), subnormal
//     inputs and results flushed to zero. So each addition is within one unit in the last place.
//   - "emulated", on a CPU without either: the rounded operands widened to fp32 and multiplied by
//     the BLAS's sgemm: the same rounded inputs and fp32 accumulation, in sgemm's order, at sgemm's speed
//     plus the rounding pass.
// Chosen at run time from the CPU's features; set_bf16_kernel forces one (tests).
// Decoding's attention (one query per sequence against a float32 cache, ops/attention.cpp) is not a gemm_bf16: it
// rounds q, k, the weights and v as it reads them and adds the exact products in float32 on every CPU, the
// emulated maths, since reading the cache, not multiplying, bounds it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ct {

using bf16_t = std::uint16_t;

inline bf16_t to_bf16(float x) {
    std::uint32_t u;
    __builtin_memcpy(&u, &x, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return bf16_t(0x7FC0);  // NaN
    return bf16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);        // ties to even; overflow reaches inf
}
inline float from_bf16(bf16_t h) {
    const std::uint32_t u = std::uint32_t(h) << 16;
    float x;
    __builtin_memcpy(&x, &u, 4);
    return x;
}

// out[i] = to_bf16(in[i]); and back.
void round_to_bf16(const float* in, bf16_t* out, std::size_t n);
void widen_bf16(const bf16_t* in, float* out, std::size_t n);

// One operand of gemm_bf16: op(X) is X or X^T of a row-major matrix with leading dimension ld;
// either fp32 data (f32) or bf16 data (b16), exactly one of them set.
struct Bf16Operand {
    const float* f32 = nullptr;
    const bf16_t* b16 = nullptr;
    int ld = 0;
    bool trans = false;
    static Bf16Operand fp32(const float* p, int ld, bool trans = false) { return {p, nullptr, ld, trans}; }
    static Bf16Operand bf16(const bf16_t* p, int ld, bool trans = false) { return {nullptr, p, ld, trans}; }
};

// C (m, n) = alpha * op(A) (m, k) @ op(B) (k, n) + beta * C, with op(A), op(B) rounded to bf16 and fp32
// accumulation; C is fp32, row-major, leading dimension ldc. beta is 0 or 1 (C's old values are the
// chain's start when 1). Split over the library's threads when large enough; gemm_bf16_serial stays on
// the calling thread.
void gemm_bf16(int m, int n, int k, float alpha, Bf16Operand a, Bf16Operand b, float beta, float* c, int ldc);
void gemm_bf16_serial(int m, int n, int k, float alpha, Bf16Operand a, Bf16Operand b, float beta, float* c, int ldc);

// The same products in blas::gemm's form, fp32 operands in place (the ops' bf16 drop-in: matmul, attention).
void gemm_bf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
               int ldb, float beta, float* c, int ldc);
void gemm_bf16_serial(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                      const float* b, int ldb, float beta, float* c, int ldc);

// "amx_bf16", "avx512_bf16", "neon_bf16" or "emulated": the kernel gemm_bf16 uses now.
std::string bf16_kernel();
// "auto" (the CPU's best), "amx_bf16", "avx512_bf16" or "neon_bf16" (ValueError on a CPU without it) or "emulated".
void set_bf16_kernel(const std::string& name);

}  // namespace ct
