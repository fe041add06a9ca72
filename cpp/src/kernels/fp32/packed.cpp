// The kernels of kernels/fp32/packed.hpp. Compiled with function target attributes and taken only on a CPU with
// AVX-512F, or AVX2 and FMA; elsewhere packed_available() is false and the caller uses the BLAS. Both
// kernels sum each output in order over k with one fused multiply-add per value, so they give the same
// bits.
#include "packed.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ctransformer/bf16.hpp"
#include "ctransformer/runtime/allocator.hpp"
#include "../dispatch.hpp"
#include "../../runtime/parallel.hpp"

#if defined(__x86_64__)
// GCC 12's AVX-512 headers start some intrinsics from an "undefined" vector (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#define CT_PACKED_AVX512 __attribute__((target("avx512f,fma")))
#define CT_PACKED_AVX2 __attribute__((target("avx2,fma")))

namespace ct::blas {

namespace {

// How far ahead of its use a pass that reads W from memory prefetches each block's stream: 512 floats, 2 KiB, 32
// lines. The hardware's stream prefetcher stops at every 4 KiB page, and a tile reads 2-4 blocks k x 64 bytes apart;
// without the hint GPT-2's products in a decoding step at batch 32 took 52-57 ms, with it 44-46 (256 to 8192 floats
// all helped, 512 most; Intel Xeon, 2 threads), 3-8 rows 10-20% less. The AVX2 kernel's one stream too: at 4 rows
// 27-29 -> 23-25 ms (the same Xeon at the AVX2 level, a stand-in for an AVX2 CPU).
constexpr int kPrefetchAhead = 512;

// Rows [r0, r0 + MR) and NV blocks of 16 outputs from column n (the blocks at or past n1 are skipped).
// Every loop over the accumulators is unrolled in full and skips rather than breaks: an accumulator indexed at
// run time makes GCC keep them in memory (docs/DESIGN.md, section 7b). "unroll 12" covers every MR and NV
// instantiated below; a smaller count than the trip count (it was 4, with MR 5 and 6) leaves the loop rolled
// and the accumulators of tile<6, 4> on the stack. ahead: prefetch each block's stream that many floats ahead
// (0: none; the pass reads W from L2).
template <int MR, int NV>
CT_PACKED_AVX512 void tile(const float* x, int ldx, const PackedWeight& w, float alpha, bool accumulate, float* c,
                           int ldc, int r0, int n, int n1, int ahead = 0) {
    const int k = w.k;
    const float* b = w.data.get() + std::size_t(n / 16) * std::size_t(k) * 16;
    __m512 acc[MR][NV];
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 12
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
    const float* xr = x + std::size_t(r0) * std::size_t(ldx);
    for (int p = 0; p < k; ++p) {
        __m512 wv[NV];
#pragma GCC unroll 12
        for (int v = 0; v < NV; ++v) wv[v] = _mm512_loadu_ps(b + (std::size_t(v) * k + p) * 16);
        if (ahead)
#pragma GCC unroll 12
            for (int v = 0; v < NV; ++v) _mm_prefetch(b + (std::size_t(v) * k + p) * 16 + ahead, _MM_HINT_T0);
#pragma GCC unroll 12
        for (int r = 0; r < MR; ++r) {
            const __m512 xv = _mm512_set1_ps(xr[std::size_t(r) * ldx + p]);
#pragma GCC unroll 12
            for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(xv, wv[v], acc[r][v]);
        }
    }
    const __m512 a = _mm512_set1_ps(alpha);
#pragma GCC unroll 12
    for (int v = 0; v < NV; ++v) {
        const int col = n + 16 * v;
        if (col >= n1) continue;
        const __mmask16 mask = n1 - col >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n1 - col)) - 1u);
#pragma GCC unroll 12
        for (int r = 0; r < MR; ++r) {
            float* cr = c + std::size_t(r0 + r) * std::size_t(ldc) + col;
            __m512 y = alpha == 1.0f ? acc[r][v] : _mm512_mul_ps(a, acc[r][v]);
            if (accumulate) y = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, cr), y);
            _mm512_mask_storeu_ps(cr, mask, y);
        }
    }
}

template <int MR>
CT_PACKED_AVX512 void rows(const float* x, int ldx, const PackedWeight& w, float alpha, bool accumulate, float* c,
                           int ldc, int r0, int n0, int n1) {
    const int ahead = kPrefetchAhead;  // one pass over the panel: every read comes from memory
    int n = n0;
    for (; n + 64 <= n1; n += 64) tile<MR, 4>(x, ldx, w, alpha, accumulate, c, ldc, r0, n, n1, ahead);
    const int left = n1 - n;
    if (left > 48) tile<MR, 4>(x, ldx, w, alpha, accumulate, c, ldc, r0, n, n1, ahead);
    else if (left > 32) tile<MR, 3>(x, ldx, w, alpha, accumulate, c, ldc, r0, n, n1, ahead);
    else if (left > 16) tile<MR, 2>(x, ldx, w, alpha, accumulate, c, ldc, r0, n, n1, ahead);
    else if (left > 0) tile<MR, 1>(x, ldx, w, alpha, accumulate, c, ldc, r0, n, n1, ahead);
}

// MR rows (6-12) of a panel [n0, n1) of at most 64 outputs in halves of 32: MR x 2 accumulators (24 at 12 rows),
// two weight vectors and a broadcast. Against 4 rows x 64 outputs, each weight vector read from L2 serves 12 rows
// instead of 4; the panel itself stays in L2 across the passes.
template <int MR>
CT_PACKED_AVX512 void rows_in_halves(const float* x, int ldx, const PackedWeight& w, float alpha, bool accumulate,
                                     float* c, int ldc, int r0, int n0, int n1, int ahead) {
    for (int n = n0; n < n1; n += 32) {
        if (n1 - n > 16) tile<MR, 2>(x, ldx, w, alpha, accumulate, c, ldc, r0, n, n1, ahead);
        else tile<MR, 1>(x, ldx, w, alpha, accumulate, c, ldc, r0, n, n1, ahead);
    }
}

CT_PACKED_AVX512 void pass_in_halves(int mr, const float* x, int ldx, const PackedWeight& w, float alpha,
                                     bool accumulate, float* c, int ldc, int r0, int n0, int n1, int ahead) {
    switch (mr) {
        case 12: return rows_in_halves<12>(x, ldx, w, alpha, accumulate, c, ldc, r0, n0, n1, ahead);
        case 11: return rows_in_halves<11>(x, ldx, w, alpha, accumulate, c, ldc, r0, n0, n1, ahead);
        case 10: return rows_in_halves<10>(x, ldx, w, alpha, accumulate, c, ldc, r0, n0, n1, ahead);
        case 9: return rows_in_halves<9>(x, ldx, w, alpha, accumulate, c, ldc, r0, n0, n1, ahead);
        case 8: return rows_in_halves<8>(x, ldx, w, alpha, accumulate, c, ldc, r0, n0, n1, ahead);
        case 7: return rows_in_halves<7>(x, ldx, w, alpha, accumulate, c, ldc, r0, n0, n1, ahead);
        default: return rows_in_halves<6>(x, ldx, w, alpha, accumulate, c, ldc, r0, n0, n1, ahead);
    }
}

// AVX2: 16 ymm registers. MR rows x one block of 16 outputs (two ymm each): 12 accumulators at 6 rows, two
// weight vectors and a broadcast. The block (16 x k floats, 16 KiB at k = 256) stays in L1 for every row.
template <int MR>
CT_PACKED_AVX2 void tile_avx2(const float* x, int ldx, const PackedWeight& w, float alpha, bool accumulate, float* c,
                              int ldc, int r0, int n, int n1, int ahead) {
    const int k = w.k;
    const float* b = w.data.get() + std::size_t(n / 16) * std::size_t(k) * 16;
    __m256 acc[MR][2];
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    const float* xr = x + std::size_t(r0) * std::size_t(ldx);
    for (int p = 0; p < k; ++p) {
        const __m256 w0 = _mm256_loadu_ps(b + std::size_t(p) * 16), w1 = _mm256_loadu_ps(b + std::size_t(p) * 16 + 8);
        if (ahead) _mm_prefetch(b + std::size_t(p) * 16 + ahead, _MM_HINT_T0);
#pragma GCC unroll 6
        for (int r = 0; r < MR; ++r) {
            const __m256 xv = _mm256_broadcast_ss(xr + std::size_t(r) * ldx + p);
            acc[r][0] = _mm256_fmadd_ps(xv, w0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(xv, w1, acc[r][1]);
        }
    }
    const __m256 a = _mm256_set1_ps(alpha);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
        const int col = n + 8 * h;
        if (col >= n1) continue;
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(std::min(8, n1 - col)), lane);
#pragma GCC unroll 6
        for (int r = 0; r < MR; ++r) {
            float* cr = c + std::size_t(r0 + r) * std::size_t(ldc) + col;
            __m256 y = alpha == 1.0f ? acc[r][h] : _mm256_mul_ps(a, acc[r][h]);
            if (accumulate) y = _mm256_add_ps(_mm256_maskload_ps(cr, mask), y);
            _mm256_maskstore_ps(cr, mask, y);
        }
    }
}

CT_PACKED_AVX2 void packed_gemm_avx2(int m, const float* x, int ldx, const PackedWeight& w, float alpha,
                                     bool accumulate, float* c, int ldc, int n0, int n1) {
    for (int col = n0; col < n1; col += 16) {
        // The first pass over the block reads it from memory (prefetching), the others from L1.
        int i = 0;
        for (; i + 6 <= m; i += 6) tile_avx2<6>(x, ldx, w, alpha, accumulate, c, ldc, i, col, n1, i ? 0 : kPrefetchAhead);
        const int ahead = i ? 0 : kPrefetchAhead;
        switch (m - i) {
            case 5: tile_avx2<5>(x, ldx, w, alpha, accumulate, c, ldc, i, col, n1, ahead); break;
            case 4: tile_avx2<4>(x, ldx, w, alpha, accumulate, c, ldc, i, col, n1, ahead); break;
            case 3: tile_avx2<3>(x, ldx, w, alpha, accumulate, c, ldc, i, col, n1, ahead); break;
            case 2: tile_avx2<2>(x, ldx, w, alpha, accumulate, c, ldc, i, col, n1, ahead); break;
            case 1: tile_avx2<1>(x, ldx, w, alpha, accumulate, c, ldc, i, col, n1, ahead); break;
            default: break;
        }
    }
}

}  // namespace

// The kernel level's choice (kernels/dispatch.hpp).
bool packed_available() { return kernels::float_kernel() != kernels::FloatKernel::Blas; }

namespace {

// dst[p][j] = src[j][p] for 16 x 16 floats (src's rows ld apart): 16 loads, 64 shuffles in four rounds (pairs of
// floats, of doubles, of 128-bit lanes twice), 16 stores. Packing GPT-2's 124 M weights for a decoding call (once
// per generate call) took ~85 ms through the scalar tile below with the weights in cache and 115-165 ms from memory,
// 45 and 65-95 ms with it (Intel Xeon, 2 threads): at batch 8 a step is ~30 ms.
CT_PACKED_AVX512 void transpose16(const float* src, std::size_t ld, float* dst) {
    __m512 r[16], t[16];
    for (int j = 0; j < 16; ++j) r[j] = _mm512_loadu_ps(src + std::size_t(j) * ld);
    for (int j = 0; j < 16; j += 2) {  // t[j]: rows j, j + 1 interleaved by floats (low and high halves of lanes)
        t[j] = _mm512_unpacklo_ps(r[j], r[j + 1]);
        t[j + 1] = _mm512_unpackhi_ps(r[j], r[j + 1]);
    }
    for (int j = 0; j < 16; j += 4) {  // then 4 rows by pairs of floats
        const __m512d a = _mm512_castps_pd(t[j]), b = _mm512_castps_pd(t[j + 1]), c = _mm512_castps_pd(t[j + 2]),
                      d = _mm512_castps_pd(t[j + 3]);
        r[j] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[j + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[j + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[j + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int j = 0; j < 16; j += 8)  // 8 rows by 128-bit lanes
        for (int i = 0; i < 4; ++i) {
            t[j + i] = _mm512_shuffle_f32x4(r[j + i], r[j + 4 + i], 0x88);
            t[j + 4 + i] = _mm512_shuffle_f32x4(r[j + i], r[j + 4 + i], 0xdd);
        }
    for (int i = 0; i < 8; ++i) {  // all 16
        r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xdd);
    }
    for (int p = 0; p < 16; ++p) _mm512_storeu_ps(dst + std::size_t(p) * 16, r[p]);
}

// Block blk of W (its 16 outputs from 16 blk) as [k][16], 16 values of k at a time through a 16 x 16 tile
// (transpose16 with AVX-512, else on the stack): every read is a run of 16 floats of a row and every write a run of 256. Writing one row of W at
// a time (stride 16 floats across k) runs at 2 GB/s, and a weight packed per decoding call at batch 1 is 8 MB
// for the projection.
// round_bf16: each value rounded to bf16 (to nearest, ties to even, as to_bf16) as it is copied.
void pack_block(const float* w, int n, int k, int ldw, int blk, float* o, bool round_bf16, bool avx512) {
    const float* wb = w + std::size_t(blk) * 16 * std::size_t(ldw);
    const int rows = std::min(16, n - 16 * blk);
    int p0 = 0;
    if (rows == 16)
        for (; p0 + 16 <= k; p0 += 16) {
            if (avx512 && !round_bf16) {
                transpose16(wb + p0, std::size_t(ldw), o + std::size_t(p0) * 16);
                continue;
            }
            float t[16][16];
            for (int j = 0; j < 16; ++j)
                for (int p = 0; p < 16; ++p) t[p][j] = wb[std::size_t(j) * std::size_t(ldw) + std::size_t(p0 + p)];
            if (round_bf16)
                for (auto& row : t)
                    for (float& v : row) v = from_bf16(to_bf16(v));
            std::memcpy(o + std::size_t(p0) * 16, t, sizeof t);
        }
    for (; p0 < k; ++p0)  // the last block's rows past n are zeros
        for (int j = 0; j < 16; ++j) {
            const float v = j < rows ? wb[std::size_t(j) * std::size_t(ldw) + std::size_t(p0)] : 0.0f;
            o[std::size_t(p0) * 16 + std::size_t(j)] = round_bf16 ? from_bf16(to_bf16(v)) : v;
        }
}

}  // namespace

void pack_weight(const float* w, int n, int k, int ldw, PackedWeight& out, bool round_bf16) {
    out.n = n;
    out.k = k;
    const std::size_t blocks = std::size_t(n + 15) / 16, block = std::size_t(k) * 16;
    out.data = cached_array<float>(blocks * block);
    // Blocks split over the threads (pieces of >= 64K floats): packing reads the weight once and writes it
    // once, bound by memory as the products are; on one thread it takes twice as long (8000 x 256: ~630 us
    // against ~280 us split, about 2 products of 5 rows).
    float* packed = out.data.get();
    const bool avx512 = kernels::float_kernel() == kernels::FloatKernel::Avx512;
    parallel::parallel_for(blocks, std::max<std::size_t>(1, 4096 / std::size_t(std::max(k, 1))),
                           [&](std::size_t b0, std::size_t b1) {
                               for (std::size_t blk = b0; blk < b1; ++blk)
                                   pack_block(w, n, k, ldw, int(blk), packed + blk * block, round_bf16, avx512);
                           });
}

static CT_PACKED_AVX512 void packed_gemm_avx512(int m, const float* x, int ldx, const PackedWeight& w, float alpha,
                                                bool accumulate, float* c, int ldc, int n0, int n1) {
    // Panels of 64 outputs outermost, so a panel of the weight (64 x k floats) stays in cache for every row.
    for (int col = n0; col < n1; col += 64) {
        const int col1 = std::min(n1, col + 64);
        // 5 or 6 rows (beam 5 or 6 at batch 1) in one pass: 24 accumulators, 4 weight vectors and a
        // broadcast still fit the 32 registers, and the panel is read once instead of twice.
        if (m == 5) {
            rows<5>(x, ldx, w, alpha, accumulate, c, ldc, 0, col, col1);
            continue;
        }
        if (m == 6) {
            rows<6>(x, ldx, w, alpha, accumulate, c, ldc, 0, col, col1);
            continue;
        }
        if (m <= 4) {
            switch (m) {
                case 4: rows<4>(x, ldx, w, alpha, accumulate, c, ldc, 0, col, col1); break;
                case 3: rows<3>(x, ldx, w, alpha, accumulate, c, ldc, 0, col, col1); break;
                case 2: rows<2>(x, ldx, w, alpha, accumulate, c, ldc, 0, col, col1); break;
                case 1: rows<1>(x, ldx, w, alpha, accumulate, c, ldc, 0, col, col1); break;
                default: break;
            }
            continue;
        }
        // 7 rows or more: ceil(m / 12) passes of as even a size as they divide into (32 = 11 + 11 + 10, 13 =
        // 7 + 6), each 6-12 rows, so no pass is a thin remainder.
        const int passes = (m + 11) / 12;
        // The first pass reads the panel from memory (prefetching), the others from L2.
        for (int i = 0, p = 0; p < passes; ++p) {
            const int mr = (m - i) / (passes - p);
            pass_in_halves(mr, x, ldx, w, alpha, accumulate, c, ldc, i, col, col1, p == 0 ? kPrefetchAhead : 0);
            i += mr;
        }
    }
}

void packed_gemm(int m, const float* x, int ldx, const PackedWeight& w, float alpha, bool accumulate, float* c, int ldc,
                 int n0, int n1) {
    if (kernels::float_kernel() == kernels::FloatKernel::Avx512) return packed_gemm_avx512(m, x, ldx, w, alpha, accumulate, c, ldc, n0, n1);
    packed_gemm_avx2(m, x, ldx, w, alpha, accumulate, c, ldc, n0, n1);
}

}  // namespace ct::blas

#else

namespace ct::blas {
bool packed_available() { return false; }
void pack_weight(const float*, int, int, int, PackedWeight&, bool) {}
void packed_gemm(int, const float*, int, const PackedWeight&, float, bool, float*, int, int, int) {}
}  // namespace ct::blas

#endif
