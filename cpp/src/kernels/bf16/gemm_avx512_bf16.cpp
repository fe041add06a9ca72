// The AVX512_BF16 kernel of gemm_bf16 (bf16.hpp). Compiled with function target attributes, so one
// portable build carries it; gemm.cpp calls it only when the CPU reports AVX512_BF16.
//
// Blocking (Goto's): C is computed in 12 x 32 tiles, 24 zmm accumulators, one vdpbf16ps per 16
// columns and bf16 pair of k. For each block of KC = 256 values of k, a block of op(B) (up to NC
// columns) is packed into 32-column panels of k pairs, [KC/2][32] x (b[2p], b[2p+1]), and blocks of
// op(A) (MC rows) into 12-row panels, [12][KC/2] pairs or [KC/2][12] pairs (transposed A). Packing
// rounds fp32 operands to bf16 on the way, so an fp32 operand is read once per block and never copied
// whole. Measured at the base model's training products on a 2-vCPU Zen 5: 86-95% of the bf16 limit
// (docs/DESIGN.md, section 9).
#include "gemm_kernels.hpp"

#if defined(__x86_64__)
// GCC 12's AVX-512 headers start masked intrinsics from an "undefined" vector and warn about it
// (a false positive, GCC bug 105593) when they are inlined into a function with a target attribute.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#define CT_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace ct::bf16_kernels {

namespace {

constexpr int MR = 12, NR = 32;
constexpr int KC = 256, KCP = KC / 2;  // k block: values / pairs
constexpr int MC = 192;                // rows of A per packed block (16 micro-panels)
constexpr int NC = 4096;                // columns of B per packed block

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

// op(B) rows [pc, pc + kc), columns [j0, j0 + nc) -> 32-column panels of [kcp][32] pairs.
template <class T>
CT_BF16_TARGET void pack_b(const T* B, int ldb, bool tb, int pc, int kc, int j0, int nc, std::uint32_t* out) {
    const int kcp = (kc + 1) / 2;
    for (int j = 0; j < nc; j += NR) {
        const int nr = std::min(NR, nc - j);
        std::uint32_t* o = out + std::size_t(j / NR) * kcp * NR;
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

// op(A) rows [ic, ic + mc), k in [pc, pc + kc) -> 12-row panels: [12][KCP] pairs, or [kcp][12] pairs
// when A is transposed (A[k][m]: a pair joins rows k and k + 1 of one column).
template <class T>
CT_BF16_TARGET void pack_a(const T* A, int lda, bool ta, int pc, int kc, int ic, int mc, std::uint32_t* out) {
    const int kcp = (kc + 1) / 2;
    for (int i = 0; i < mc; i += MR) {
        std::uint32_t* o = out + std::size_t(i / MR) * KCP * MR;
        const int rows = std::min(MR, mc - i);
        if (!ta) {
            for (int r = 0; r < MR; ++r) {
                bf16_t* d = reinterpret_cast<bf16_t*>(o + std::size_t(r) * KCP);
                if (r >= rows) {
                    std::memset(d, 0, std::size_t(kcp) * 4);
                    continue;
                }
                const T* src = A + std::size_t(ic + i + r) * lda + pc;
                for (int p = 0; p < kc; p += 32) {
                    const int cnt = std::min(32, kc - p);
                    _mm512_mask_storeu_epi16(d + p, cnt >= 32 ? __mmask32(0xFFFFFFFFu) : __mmask32((1u << cnt) - 1u),
                                             load32(src + p, cnt));
                }
                if (kc & 1) d[kc] = 0;
            }
        } else {
            const __mmask16 m = __mmask16((1u << MR) - 1u);
            for (int kp = 0; kp < kcp; ++kp) {
                const int k0 = pc + 2 * kp, k1 = k0 + 1;
                const __m512i v0 = load16(A + std::size_t(k0) * lda + ic + i, rows);
                const __m512i v1 = k1 < pc + kc ? load16(A + std::size_t(k1) * lda + ic + i, rows) : _mm512_setzero_si512();
                _mm512_mask_storeu_epi32(o + std::size_t(kp) * MR, m, _mm512_or_si512(v0, _mm512_slli_epi32(v1, 16)));
            }
        }
    }
}

// A 12 x 32 tile of C over kcp pairs: C = acc (start 0, or C's values when `accumulate`), times
// `scale` at the end when `scaled`. SK, SR: strides (in pairs) of a k pair and a row in A's panel.
template <int SK, int SR>
CT_BF16_TARGET __attribute__((always_inline)) inline void tile(int kcp, const std::uint32_t* __restrict ap,
                                                               const std::uint32_t* __restrict bp, float* C, int ldc,
                                                               int mr, int nr, bool accumulate, bool scaled, float scale) {
    const __mmask16 m0 = nr >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << nr) - 1u);
    const __mmask16 m1 = nr >= 32 ? __mmask16(0xFFFF) : nr > 16 ? __mmask16((1u << (nr - 16)) - 1u) : __mmask16(0);
    __m512 c[MR][2];
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
        if (accumulate && r < mr) {
            c[r][0] = _mm512_maskz_loadu_ps(m0, C + std::size_t(r) * ldc);
            c[r][1] = _mm512_maskz_loadu_ps(m1, C + std::size_t(r) * ldc + 16);
        } else {
            c[r][0] = _mm512_setzero_ps();
            c[r][1] = _mm512_setzero_ps();
        }
    }
    for (int kp = 0; kp < kcp; ++kp) {
        const __m512bh b0 = (__m512bh)_mm512_load_si512(bp + std::size_t(kp) * NR);
        const __m512bh b1 = (__m512bh)_mm512_load_si512(bp + std::size_t(kp) * NR + 16);
        const std::uint32_t* a = ap + std::size_t(kp) * SK;
#pragma GCC unroll 12
        for (int r = 0; r < MR; ++r) {
            const __m512bh av = (__m512bh)_mm512_set1_epi32(int(a[r * SR]));
            c[r][0] = _mm512_dpbf16_ps(c[r][0], av, b0);
            c[r][1] = _mm512_dpbf16_ps(c[r][1], av, b1);
        }
    }
    const __m512 s = _mm512_set1_ps(scale);
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
        if (r < mr) {
            _mm512_mask_storeu_ps(C + std::size_t(r) * ldc, m0, scaled ? _mm512_mul_ps(c[r][0], s) : c[r][0]);
            _mm512_mask_storeu_ps(C + std::size_t(r) * ldc + 16, m1, scaled ? _mm512_mul_ps(c[r][1], s) : c[r][1]);
        }
    }
}

template <int SK, int SR>
CT_BF16_TARGET void tiles(int kcp, int mc, int nc, const std::uint32_t* Ap, const std::uint32_t* Bp, float* C, int ldc,
                          bool accumulate, bool scaled, float scale) {
    for (int j = 0; j < nc; j += NR) {
        const std::uint32_t* bp = Bp + std::size_t(j / NR) * kcp * NR;
        const int nr = std::min(NR, nc - j);
        for (int i = 0; i < mc; i += MR)
            tile<SK, SR>(kcp, Ap + std::size_t(i / MR) * KCP * MR, bp, C + std::size_t(i) * ldc + j, ldc,
                         std::min(MR, mc - i), nr, accumulate, scaled, scale);
    }
}

struct AlignedFree {
    void operator()(std::uint32_t* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<std::uint32_t[], AlignedFree>;

Buffer aligned(std::size_t words) {
    return Buffer(static_cast<std::uint32_t*>(std::aligned_alloc(64, words * 4)));
}

// Words of one k block of a shared packed A (all of A's rows), and where row panel `panel` starts in it.
std::size_t a_block_words(int m) { return std::size_t((m + MR - 1) / MR) * KCP * MR; }

template <class TA, class TB>
CT_BF16_TARGET void block(const Block& g, const TA* A, const TB* B, const std::uint32_t* shared_a) {
    // Each thread packs into its own buffers, kept for the thread's life (the pool's threads persist).
    thread_local Buffer a_buf = aligned(std::size_t(MC) * KCP);
    thread_local Buffer b_buf = aligned(std::size_t(NC) * KCP);
    for (int jc = g.n0; jc < g.n1; jc += NC) {
        const int nc = std::min(NC, g.n1 - jc);
        for (int pc = 0; pc < g.k; pc += KC) {
            const int kc = std::min(KC, g.k - pc), kcp = (kc + 1) / 2;
            const bool last = pc + KC >= g.k;
            pack_b(B, g.ldb, g.tb, pc, kc, jc, nc, b_buf.get());
            for (int ic = g.m0; ic < g.m1; ic += MC) {
                const int mc = std::min(MC, g.m1 - ic);
                const std::uint32_t* ap = a_buf.get();
                if (shared_a)  // packed once for every thread (pack_shared_a); ic is a multiple of MR here
                    ap = shared_a + std::size_t(pc / KC) * a_block_words(g.m1) + std::size_t(ic / MR) * KCP * MR;
                else
                    pack_a(A, g.lda, g.ta, pc, kc, ic, mc, a_buf.get());
                float* C = g.c + std::size_t(ic) * g.ldc + jc;
                const bool accumulate = pc > 0 || g.accumulate;
                const bool scaled = last && g.alpha != 1.0f;  // (never with g.accumulate: gemm.cpp)
                if (!g.ta)
                    tiles<1, KCP>(kcp, mc, nc, ap, b_buf.get(), C, g.ldc, accumulate, scaled, g.alpha);
                else
                    tiles<MR, 1>(kcp, mc, nc, ap, b_buf.get(), C, g.ldc, accumulate, scaled, g.alpha);
            }
        }
    }
}

template <class TA>
CT_BF16_TARGET void pack_shared(const Block& g, const TA* A, int panel0, int panel1, std::uint32_t* out) {
    const int r0 = panel0 * MR, r1 = std::min(g.m1, panel1 * MR);
    for (int pc = 0; pc < g.k; pc += KC)
        pack_a(A, g.lda, g.ta, pc, std::min(KC, g.k - pc), r0, r1 - r0,
               out + std::size_t(pc / KC) * a_block_words(g.m1) + std::size_t(panel0) * KCP * MR);
}

// A few rows of C (decoding: one per sentence or beam) against a transposed B (a weight, B[n][k]): no
// packing. The rows of A are rounded once into 32-value chunks; for each column n, one 16-lane accumulator
// per row takes vdpbf16ps of each chunk (lane j sums the k pairs p with p = j mod 16, in order), then the
// lanes are added by halves: 16 -> 8 -> 4 -> 2 -> 1 (bf16.hpp).
// The lanes of a 16-lane sum added by halves: 16 -> 8 -> 4 -> 2 -> 1.
CT_BF16_TARGET inline float sum_by_halves(__m512 v) {
    const __m256 h8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    const __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
    const __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
    return _mm_cvtss_f32(_mm_add_ss(h2, _mm_shuffle_ps(h2, h2, 1)));
}

// R rows (their accumulators stay in registers) against columns [n0, n1) of B; a: the rows, rounded,
// each kp values apart.
template <int R, class TB>
CT_BF16_TARGET void few_rows_columns(const Block& g, const bf16_t* a, int kp, const TB* B) {
    const int k = g.k;
    for (int n = g.n0; n < g.n1; ++n) {
        const TB* w = B + std::size_t(n) * g.ldb;
        __m512 acc[R];
        for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
        for (int p = 0; p < k; p += 32) {
            const __m512bh wv = (__m512bh)load32(w + p, std::min(32, k - p));
            for (int r = 0; r < R; ++r)
                acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)_mm512_loadu_si512(a + std::size_t(r) * kp + p), wv);
        }
        for (int r = 0; r < R; ++r) {
            // intrinsics, not C++ arithmetic: the compiler may not fuse alpha's product with C's sum
            __m128 sum = _mm_set_ss(sum_by_halves(acc[r]));
            if (g.alpha != 1.0f) sum = _mm_mul_ss(sum, _mm_set_ss(g.alpha));
            float* c = g.c + std::size_t(g.m0 + r) * g.ldc + n;
            *c = _mm_cvtss_f32(g.accumulate ? _mm_add_ss(_mm_set_ss(*c), sum) : sum);
        }
    }
}

// A few rows of C (decoding: one per sentence or beam) against a transposed B (a weight, B[n][k]): no
// packing. The rows of A are rounded once into 32-value chunks; for each column n, one 16-lane accumulator
// per row takes vdpbf16ps of each chunk (lane j sums the k pairs p with p = j mod 16, in order), then the
// lanes are added by halves (bf16.hpp).
template <class TA, class TB>
CT_BF16_TARGET void few_rows(const Block& g, const TA* A, const TB* B) {
    const int rows = g.m1 - g.m0, k = g.k, kp = (k + 31) / 32 * 32;
    thread_local std::vector<bf16_t> a_rows;
    a_rows.assign(std::size_t(rows) * kp, 0);
    bf16_t* a = a_rows.data();
    for (int r = 0; r < rows; ++r)
        for (int p = 0; p < k; p += 32)
            _mm512_storeu_si512(a + std::size_t(r) * kp + p, load32(A + std::size_t(g.m0 + r) * g.lda + p, std::min(32, k - p)));
    switch (rows) {
        case 1: return few_rows_columns<1>(g, a, kp, B);
        case 2: return few_rows_columns<2>(g, a, kp, B);
        case 3: return few_rows_columns<3>(g, a, kp, B);
        case 4: return few_rows_columns<4>(g, a, kp, B);
        case 5: return few_rows_columns<5>(g, a, kp, B);
        case 6: return few_rows_columns<6>(g, a, kp, B);
        case 7: return few_rows_columns<7>(g, a, kp, B);
        default: return few_rows_columns<8>(g, a, kp, B);
    }
}

}  // namespace

void avx512_bf16_few_rows(const Block& g) {
    if (g.a32 && g.b32) return few_rows(g, g.a32, g.b32);
    if (g.a32) return few_rows(g, g.a32, g.b16);
    if (g.b32) return few_rows(g, g.a16, g.b32);
    return few_rows(g, g.a16, g.b16);
}

void avx512_bf16_block(const Block& g, const std::uint32_t* shared_a) {
    if (g.a32 && g.b32) return block(g, g.a32, g.b32, shared_a);
    if (g.a32) return block(g, g.a32, g.b16, shared_a);
    if (g.b32) return block(g, g.a16, g.b32, shared_a);
    return block(g, g.a16, g.b16, shared_a);
}

std::size_t avx512_bf16_shared_a_words(int m, int k) { return std::size_t((k + KC - 1) / KC) * a_block_words(m); }

void avx512_bf16_pack_shared_a(const Block& g, int panel0, int panel1, std::uint32_t* out) {
    if (g.a32) return pack_shared(g, g.a32, panel0, panel1, out);
    return pack_shared(g, g.a16, panel0, panel1, out);
}

}  // namespace ct::bf16_kernels

#else

namespace ct::bf16_kernels {
// Never called: gemm.cpp checks the CPU first.
void avx512_bf16_block(const Block&, const std::uint32_t*) {}
void avx512_bf16_few_rows(const Block&) {}
std::size_t avx512_bf16_shared_a_words(int, int) { return 0; }
void avx512_bf16_pack_shared_a(const Block&, int, int, std::uint32_t*) {}
}  // namespace ct::bf16_kernels

#endif
