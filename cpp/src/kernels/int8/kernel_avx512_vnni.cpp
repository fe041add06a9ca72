// The AVX512_VNNI int8 kernel (int8.hpp): tiles of up to 6 rows x 64 columns, 24 zmm accumulators, one
// vpdpbusd per row, 16 columns and 4 values of k. (Tiles of 4 rows are 10-30% slower from 5 rows on: each
// group of 4 weight vectors serves fewer products, and 5 rows, a beam, take two passes over the weight.)
// vpdpbusd multiplies unsigned by signed bytes, so each broadcast group of 4 activations is offset by 128
// (xor 0x80) and 128 sum_k q_w[n, k] is taken off the sum at the end. Compiled with function target
// attributes; linear_int8 calls it only on CPUs with AVX-512 (F, BW, VL, DQ) and VNNI.
#include "kernels.hpp"

#if defined(__x86_64__)
// GCC 12's AVX-512 headers start masked intrinsics from an "undefined" vector (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#define CT_INT8_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

namespace ct::int8_kernels {

namespace {

CT_INT8_TARGET inline __mmask16 first(std::size_t cnt) {
    return cnt >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cnt) - 1u);
}

// Rows [0, MR) of the product for NV blocks of 16 columns from column n (cnt columns are kept).
template <int MR, int NV>
CT_INT8_TARGET void tile(const Problem& p, std::size_t row, std::size_t n, std::size_t cnt) {
    const Int8Weight& w = *p.w;
    const std::size_t kg = w.k_groups();
    const std::int8_t* b = w.packed.data() + (n / 16) * kg * 64;
    const std::int8_t* a = p.qx + row * p.lda;
    const __m512i offset = _mm512_set1_epi32(int(0x80808080u));
    // Every loop over the tile's registers is unrolled: an accumulator indexed at run time anywhere (as by
    // a `break` in the store loop) makes GCC keep the array in memory, spilling and copying accumulators
    // on every group of k, at half the speed.
    __m512i acc[MR][NV];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_si512();
    for (std::size_t g = 0; g < kg; ++g) {
        __m512i wv[NV];
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) wv[v] = _mm512_loadu_si512(b + (v * kg + g) * 64);
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
            std::int32_t four;
            __builtin_memcpy(&four, a + r * p.lda + 4 * g, 4);
            const __m512i av = _mm512_xor_si512(_mm512_set1_epi32(four), offset);
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], av, wv[v]);
        }
    }
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
        const std::size_t c = n + 16 * v;
        if (c >= n + cnt) continue;  // (not break: see above)
        const __mmask16 k = first(n + cnt - c);
        const __m512i comp = _mm512_slli_epi32(_mm512_maskz_loadu_epi32(k, w.row_sum.data() + c), 7);
        const __m512 ws = _mm512_maskz_loadu_ps(k, w.scale.data() + c);
        const __m512 bias = p.bias ? _mm512_maskz_loadu_ps(k, p.bias + c) : _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
            const __m512i s32 = _mm512_sub_epi32(acc[r][v], comp);
            if (p.acc_out) {
                _mm512_mask_storeu_epi32(p.acc_out + (row + r) * w.out_features + c, k, s32);
                continue;
            }
            const __m512 s = _mm512_mul_ps(_mm512_set1_ps(p.row_scale[row + r]), ws);
            __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(s32), s);
            if (p.bias) y = _mm512_add_ps(y, bias);
            _mm512_mask_storeu_ps(p.y + (row + r) * p.ldy + c, k, y);
        }
    }
}

template <int MR>
CT_INT8_TARGET void rows(const Problem& p, std::size_t row, std::size_t n0, std::size_t n1) {
    std::size_t n = n0;
    for (; n + 64 <= n1; n += 64) tile<MR, 4>(p, row, n, 64);
    const std::size_t left = n1 - n;
    if (left > 48) tile<MR, 4>(p, row, n, left);
    else if (left > 32) tile<MR, 3>(p, row, n, left);
    else if (left > 16) tile<MR, 2>(p, row, n, left);
    else if (left > 0) tile<MR, 1>(p, row, n, left);
}

}  // namespace

CT_INT8_TARGET void avx512_vnni(const Problem& p, std::size_t n0, std::size_t n1) {
    // Column panels of 64 outermost, so one panel of the weight (64 x k bytes) stays in cache for every row.
    for (std::size_t c = n0; c < n1; c += 64) {
        const std::size_t c1 = std::min(n1, c + 64);
        std::size_t i = 0;
        for (; i + 6 <= p.m; i += 6) rows<6>(p, i, c, c1);
        switch (p.m - i) {
            case 5: rows<5>(p, i, c, c1); break;
            case 4: rows<4>(p, i, c, c1); break;
            case 3: rows<3>(p, i, c, c1); break;
            case 2: rows<2>(p, i, c, c1); break;
            case 1: rows<1>(p, i, c, c1); break;
            default: break;
        }
    }
}

CT_INT8_TARGET void quantize_row_avx512(const float* x, std::size_t cols, std::int8_t* q, float* scale) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
    __m512i amax = _mm512_setzero_si512();
    for (std::size_t i = 0; i < cols; i += 16) {
        const __m512i u = _mm512_maskz_loadu_epi32(first(cols - i), x + i);
        amax = _mm512_max_epu32(amax, _mm512_and_si512(u, abs_mask));
    }
    alignas(64) std::uint32_t lanes[16];
    _mm512_store_si512(lanes, amax);
    std::uint32_t amax_bits = 0;
    for (std::uint32_t u : lanes) amax_bits = u > amax_bits ? u : amax_bits;
    const RowRange r = row_range(amax_bits);
    *scale = r.scale;
    const __m512 inv = _mm512_set1_ps(r.inv);
    for (std::size_t i = 0; i < cols; i += 16) {
        const __mmask16 k = first(cols - i);
        // the product rounds to nearest even under the default MXCSR, as nearbyint does
        const __m512i v = r.nonzero_finite ? _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), inv))
                                           : _mm512_setzero_si512();
        _mm_mask_storeu_epi8(q + i, k, _mm512_cvtsepi32_epi8(v));
    }
}

}  // namespace ct::int8_kernels

#endif
