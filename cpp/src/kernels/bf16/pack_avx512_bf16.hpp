// What the AVX512_BF16 and AMX-BF16 kernels of gemm_bf16 share: rounding a row's values to bf16 as they are
// read, and packing op(B) into 32-column panels of k pairs (the layout vdpbf16ps reads by 16 columns and an AMX
// tile by 16 pair rows). Included only by kernel files compiled for x86-64.
#pragma once
#if defined(__x86_64__)
// GCC 12's AVX-512 headers start masked intrinsics from an "undefined" vector and warn about it
// (a false positive, GCC bug 105593) when they are inlined into a function with a target attribute.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "ctransformer/bf16.hpp"

#define CT_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace ct::bf16_kernels::avx512 {

constexpr int NR = 32;  // columns of a packed panel of B

// 16 values of a row as 16 32-bit lanes holding the bf16 bits in their low half (cnt < 16: the rest 0).
// vcvtneps2bf16 rounds to nearest even as to_bf16 does; it flushes subnormal inputs to zero, which
// vdpbf16ps does to them anyway, and gives NaN another payload, still a NaN: the same products.
CT_BF16_TARGET inline __m512i load16(const float* p, int cnt) {
    const __mmask16 m = cnt >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cnt) - 1u);
    return _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, p)));
}
CT_BF16_TARGET inline __m512i load16(const bf16_t* p, int cnt) {
    const __mmask16 m = cnt >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cnt) - 1u);
    return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
}
// 32 consecutive values of a row (16 k pairs) as bf16, 16 bits each in order (cnt < 32: the rest 0).
CT_BF16_TARGET inline __m512i load32(const float* p, int cnt) {
    const __mmask16 m0 = cnt >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cnt) - 1u);
    const __mmask16 m1 = cnt >= 32 ? __mmask16(0xFFFF) : cnt > 16 ? __mmask16((1u << (cnt - 16)) - 1u) : __mmask16(0);
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, p + 16), _mm512_maskz_loadu_ps(m0, p));
}
CT_BF16_TARGET inline __m512i load32(const bf16_t* p, int cnt) {
    const __mmask32 m = cnt >= 32 ? __mmask32(0xFFFFFFFFu) : __mmask32((1u << cnt) - 1u);
    return _mm512_maskz_loadu_epi16(m, p);
}
inline bf16_t bits(float x) { return to_bf16(x); }
inline bf16_t bits(bf16_t x) { return x; }

// One row's kc values rounded into d as bf16, then a zero value when kc is odd (its last pair's second).
template <class T>
CT_BF16_TARGET inline void round_row(const T* src, int kc, bf16_t* d) {
    for (int p = 0; p < kc; p += 32) {
        const int cnt = std::min(32, kc - p);
        _mm512_mask_storeu_epi16(d + p, cnt >= 32 ? __mmask32(0xFFFFFFFFu) : __mmask32((1u << cnt) - 1u), load32(src + p, cnt));
    }
    if (kc & 1) d[kc] = 0;
}

// op(B) rows [pc, pc + kc), columns [j0, j0 + nc) -> 32-column panels of [kstride][32] pairs: the kcp pairs, then
// zero pairs up to kstride (>= kcp; AMX's tiles take k in whole steps of 16 pairs).
template <class T>
CT_BF16_TARGET void pack_b(const T* B, int ldb, bool tb, int pc, int kc, int j0, int nc, int kstride, std::uint32_t* out) {
    const int kcp = (kc + 1) / 2;
    for (int j = 0; j < nc; j += NR) {
        const int nr = std::min(NR, nc - j);
        std::uint32_t* o = out + std::size_t(j / NR) * kstride * NR;
        std::memset(o + std::size_t(kcp) * NR, 0, std::size_t(kstride - kcp) * NR * 4);
        if (!tb) {  // B[k][n]: a pair joins rows k and k + 1 of one column
            for (int kp = 0; kp < kcp; ++kp) {
                const int k0 = pc + 2 * kp, k1 = k0 + 1;
                for (int h = 0; h < NR; h += 16) {
                    const int cnt = std::max(0, std::min(16, nr - h));
                    const T* r0 = B + std::size_t(k0) * ldb + j0 + j + h;
                    const __m512i v0 = load16(r0, cnt);
                    const __m512i v1 = k1 < pc + kc ? load16(B + std::size_t(k1) * ldb + j0 + j + h, cnt) : _mm512_setzero_si512();
                    _mm512_store_si512(o + std::size_t(kp) * NR + h, _mm512_or_si512(v0, _mm512_slli_epi32(v1, 16)));
                }
            }
            continue;
        }
        // B[n][k]: a pair (k, k + 1) of column n is contiguous; 16 x 16 transposes of 32-bit pairs.
        const int kfull = kc / 2;
        const int kvec = nr == NR ? kfull / 16 * 16 : 0;
        for (int h = 0; h < NR && kvec; h += 16)
            for (int kp0 = 0; kp0 < kvec; kp0 += 16) {
                __m512i r[16], t[16], u[16];
                for (int i = 0; i < 16; ++i) r[i] = load32(B + std::size_t(j0 + j + h + i) * ldb + pc + 2 * kp0, 32);
                for (int i = 0; i < 8; ++i) {
                    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
                    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
                }
                for (int i = 0; i < 4; ++i) {
                    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
                    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
                    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
                    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
                }
                for (int q = 0; q < 4; ++q) {
                    const __m512i x0 = _mm512_shuffle_i32x4(u[q], u[4 + q], 0x88), x1 = _mm512_shuffle_i32x4(u[q], u[4 + q], 0xDD);
                    const __m512i y0 = _mm512_shuffle_i32x4(u[8 + q], u[12 + q], 0x88),
                                  y1 = _mm512_shuffle_i32x4(u[8 + q], u[12 + q], 0xDD);
                    std::uint32_t* d = o + std::size_t(kp0) * NR + h;
                    _mm512_store_si512(d + std::size_t(0 + q) * NR, _mm512_shuffle_i32x4(x0, y0, 0x88));
                    _mm512_store_si512(d + std::size_t(4 + q) * NR, _mm512_shuffle_i32x4(x1, y1, 0x88));
                    _mm512_store_si512(d + std::size_t(8 + q) * NR, _mm512_shuffle_i32x4(x0, y0, 0xDD));
                    _mm512_store_si512(d + std::size_t(12 + q) * NR, _mm512_shuffle_i32x4(x1, y1, 0xDD));
                }
            }
        for (int c = 0; c < NR; ++c) {  // what the transposes left: the last pairs, a short panel
            if (c >= nr) {
                for (int kp = 0; kp < kcp; ++kp) o[std::size_t(kp) * NR + c] = 0;
                continue;
            }
            const T* src = B + std::size_t(j0 + j + c) * ldb + pc;
            for (int kp = kvec; kp < kcp; ++kp) {
                const std::uint32_t lo = bits(src[2 * kp]), hi = 2 * kp + 1 < kc ? bits(src[2 * kp + 1]) : 0u;
                o[std::size_t(kp) * NR + c] = lo | (hi << 16);
            }
        }
    }
}

// A thread's packing buffer, 64-byte aligned (an AMX tile row, a zmm).
struct AlignedFree {
    void operator()(std::uint32_t* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<std::uint32_t[], AlignedFree>;

inline Buffer aligned(std::size_t words) {
    return Buffer(static_cast<std::uint32_t*>(std::aligned_alloc(64, (words * 4 + 63) / 64 * 64)));
}

}  // namespace ct::bf16_kernels::avx512

#endif  // __x86_64__
