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
#include <vector>

#include "pack_avx512_bf16.hpp"

namespace ct::bf16_kernels {

namespace {

using namespace avx512;

constexpr int MR = 12;
constexpr int KC = 256, KCP = KC / 2;  // k block: values / pairs
constexpr int MC = 192;                // rows of A per packed block (16 micro-panels)
constexpr int NC = 4096;                // columns of B per packed block

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
                round_row(A + std::size_t(ic + i + r) * lda + pc, kc, d);
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
            pack_b(B, g.ldb, g.tb, pc, kc, jc, nc, kcp, b_buf.get());
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
// each kp values apart. B's rows are read one at a time, front to back (one stream of addresses), the next row
// prefetched a step ahead of its use: without it GPT-2's bf16 step at batch 1 took 13.6-14.5 ms against 11.3-12.1
// (five alternated pairs, Xeon), at batch 2 16.6-17.2 against 13.4-14.6.
template <int R, class TB>
CT_BF16_TARGET void few_rows_columns(const Block& g, const bf16_t* a, int kp, const TB* B) {
    const int k = g.k;
    for (int n = g.n0; n < g.n1; ++n) {
        const TB* w = B + std::size_t(n) * g.ldb;
        const char* ahead = n + 1 < g.n1 ? reinterpret_cast<const char*>(w + g.ldb) : nullptr;
        __m512 acc[R];
        for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
        for (int p = 0; p < k; p += 32) {
            if (ahead)
                for (std::size_t line = 0; line < 32 * sizeof(TB); line += 64)
                    _mm_prefetch(ahead + std::size_t(p) * sizeof(TB) + line, _MM_HINT_T0);
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
