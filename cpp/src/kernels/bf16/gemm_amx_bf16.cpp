// The AMX-BF16 kernel of gemm_bf16 (bf16.hpp), for CPUs with Intel's tile unit (Sapphire Rapids and later).
// Compiled with function target attributes, so one portable build carries it; gemm.cpp calls it only at the
// "amx" kernel level (the CPU reports AMX-TILE and AMX-BF16, and Linux granted the process the tile state).
//
// Why: on such a CPU vdpbf16ps issues at half the float32 FMA's rate (an Intel Xeon, family 6 model 167: 117
// against 234 GFLOP/s a core, register-only loops), so the AVX512_BF16 kernel is slower than float32's sgemm
// there, while one tdpbf16ps multiplies a 16 x 32 by a 32 x 16 bf16 tile into 16 x 16 float32 sums: 3.8 TFLOP/s
// a core in a register-only loop. A product is then bound by packing and by reading its operands.
//
// Blocking (Goto's, as the AVX512_BF16 kernel): for each block of KC values of k, a block of op(B) (up to NC
// columns) is packed into 32-column panels of k pairs (pack_avx512_bf16.hpp; a panel is two B tiles side by side,
// 16 pair rows each step), and blocks of op(A) (MC rows) into 16-row panels, [16][KC/2] pairs (one A tile a step).
// The pairs past k up to a whole step of 16 are zero in both. C is computed in 32 x 32 blocks: four accumulator
// tiles, two A and two B tiles. Each C element is one float32 chain over the k blocks, from 0 or from C; within a
// tdpbf16ps the order of its 32 products' additions is the hardware's (Intel documents each product exact,
// round to nearest even, subnormal inputs and results flushed to zero). So the kernel is held to float32's
// summation bound, not to a bit-exact model.
#include "gemm_kernels.hpp"

#if defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>

#include "pack_avx512_bf16.hpp"

#define CT_AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")))

namespace ct::bf16_kernels {

namespace {

using namespace avx512;

constexpr int TR = 16;                   // rows of a tile: of A, of C, and B's pair rows
constexpr int KC = 512, KCP = KC / 2;    // k block: values / pairs (an A panel's row stride in pairs)
constexpr int MC = 512;                  // rows of A per packed block

// Tiles 0-3: C's 32 x 32 block (0: rows 0-15, columns 0-15; 1: rows 0-15, columns 16-31; 2, 3: rows 16-31);
// 4, 5: A's two 16-row panels; 6, 7: B's two 16-column halves. Each 16 rows of 64 bytes.
struct alignas(64) TileConfig {
    std::uint8_t palette = 1, start_row = 0;
    std::uint8_t reserved[14] = {};
    std::uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
    std::uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

// op(A) rows [ic, ic + mc), k in [pc, pc + kc) -> 16-row panels of [16][KCP] pairs, pairs [kcp, kstride) zero.
template <class T>
CT_BF16_TARGET void pack_a(const T* A, int lda, bool ta, int pc, int kc, int ic, int mc, int kstride, std::uint32_t* out) {
    const int kcp = (kc + 1) / 2;
    for (int i = 0; i < mc; i += TR) {
        std::uint32_t* o = out + std::size_t(i / TR) * TR * KCP;
        const int rows = std::min(TR, mc - i);
        for (int r = rows; r < TR; ++r) std::memset(o + std::size_t(r) * KCP, 0, std::size_t(kstride) * 4);
        for (int r = 0; r < rows; ++r) std::memset(o + std::size_t(r) * KCP + kcp, 0, std::size_t(kstride - kcp) * 4);
        if (!ta) {
            for (int r = 0; r < rows; ++r)
                round_row(A + std::size_t(ic + i + r) * lda + pc, kc, reinterpret_cast<bf16_t*>(o + std::size_t(r) * KCP));
            continue;
        }
        // A[k][m]: pair kp of the 16 rows is one vector (rows k0 and k0 + 1 of A), scattered down the panel
        const __mmask16 m = __mmask16((1u << rows) - 1u);
        const __m512i row_starts = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                      _mm512_set1_epi32(KCP));
        for (int kp = 0; kp < kcp; ++kp) {
            const int k0 = pc + 2 * kp, k1 = k0 + 1;
            const __m512i v0 = load16(A + std::size_t(k0) * lda + ic + i, rows);
            const __m512i v1 = k1 < pc + kc ? load16(A + std::size_t(k1) * lda + ic + i, rows) : _mm512_setzero_si512();
            _mm512_mask_i32scatter_epi32(o + kp, m, row_starts, _mm512_or_si512(v0, _mm512_slli_epi32(v1, 16)), 4);
        }
    }
}

// GCC's tile intrinsics paste their tile's number into the instruction's text, so it must be a literal: these
// name accumulator tiles 0-3 by a template argument (the switch folds away).
#define CT_ACCUMULATOR_TILE(T, OP) \
    switch (T) {                    \
        case 0: OP(0); break;       \
        case 1: OP(1); break;       \
        case 2: OP(2); break;       \
        default: OP(3); break;      \
    }
template <int T>
CT_AMX_TARGET inline void tile_zero() {
#define CT_OP(t) _tile_zero(t)
    CT_ACCUMULATOR_TILE(T, CT_OP)
#undef CT_OP
}
template <int T>
CT_AMX_TARGET inline void tile_load(const void* p, std::size_t stride) {
#define CT_OP(t) _tile_loadd(t, p, stride)
    CT_ACCUMULATOR_TILE(T, CT_OP)
#undef CT_OP
}
template <int T>
CT_AMX_TARGET inline void tile_store(void* p, std::size_t stride) {
#define CT_OP(t) _tile_stored(t, p, stride)
    CT_ACCUMULATOR_TILE(T, CT_OP)
#undef CT_OP
}

// Accumulator tile T for C's rows [0, rows) and columns [0, cols) (each at most 16): from C when accumulating
// (through `scratch`, zero-padded, for a part tile), else zero.
template <int T>
CT_AMX_TARGET inline void c_in(const float* C, int ldc, int rows, int cols, bool accumulate, float* scratch) {
    if (!accumulate) {
        tile_zero<T>();
        return;
    }
    if (rows == TR && cols == TR) {
        tile_load<T>(C, std::size_t(ldc) * 4);
        return;
    }
    const __mmask16 m = __mmask16((1u << cols) - 1u);
    for (int r = 0; r < TR; ++r)
        _mm512_store_ps(scratch + r * TR, r < rows ? _mm512_maskz_loadu_ps(m, C + std::size_t(r) * ldc) : _mm512_setzero_ps());
    tile_load<T>(scratch, 64);
}

// Tile T's sums into C's rows [0, rows) and columns [0, cols), times `scale` when `scaled`.
template <int T>
CT_AMX_TARGET inline void c_out(float* C, int ldc, int rows, int cols, bool scaled, float scale, float* scratch) {
    if (!scaled && rows == TR && cols == TR) {
        tile_store<T>(C, std::size_t(ldc) * 4);
        return;
    }
    tile_store<T>(scratch, 64);
    const __mmask16 m = __mmask16((1u << cols) - 1u);
    const __m512 s = _mm512_set1_ps(scale);
    for (int r = 0; r < rows; ++r) {
        const __m512 v = _mm512_load_ps(scratch + r * TR);
        _mm512_mask_storeu_ps(C + std::size_t(r) * ldc, m, scaled ? _mm512_mul_ps(v, s) : v);
    }
}

// A block of C of up to 32 x 32: RA A panels (16 rows each) by RB halves of a B panel (16 columns each), over
// `steps` steps of 16 k pairs. ap: the first A panel, the second TR * KCP words on; bp: the B panel, kstride
// pair rows of 32 columns.
template <int RA, int RB>
CT_AMX_TARGET void tile_block(int steps, const std::uint32_t* ap, const std::uint32_t* bp, float* C, int ldc, int mr,
                              int nr, bool accumulate, bool scaled, float scale) {
    alignas(64) float scratch[TR * TR];
    const int r1 = std::max(0, mr - TR), c1 = std::max(0, nr - TR);
    const int r0 = std::min(mr, TR), c0 = std::min(nr, TR);
    float* C2 = C + std::size_t(TR) * ldc;
    c_in<0>(C, ldc, r0, c0, accumulate, scratch);
    if constexpr (RB == 2) c_in<1>(C + TR, ldc, r0, c1, accumulate, scratch);
    if constexpr (RA == 2) c_in<2>(C2, ldc, r1, c0, accumulate, scratch);
    if constexpr (RA == 2 && RB == 2) c_in<3>(C2 + TR, ldc, r1, c1, accumulate, scratch);
    for (int s = 0; s < steps; ++s) {
        const std::uint32_t* a = ap + std::size_t(s) * TR;
        const std::uint32_t* b = bp + std::size_t(s) * TR * NR;
        _tile_loadd(4, a, KCP * 4);
        if constexpr (RA == 2) _tile_loadd(5, a + TR * KCP, KCP * 4);
        _tile_loadd(6, b, NR * 4);
        if constexpr (RB == 2) _tile_loadd(7, b + TR, NR * 4);
        _tile_dpbf16ps(0, 4, 6);
        if constexpr (RB == 2) _tile_dpbf16ps(1, 4, 7);
        if constexpr (RA == 2) _tile_dpbf16ps(2, 5, 6);
        if constexpr (RA == 2 && RB == 2) _tile_dpbf16ps(3, 5, 7);
    }
    c_out<0>(C, ldc, r0, c0, scaled, scale, scratch);
    if constexpr (RB == 2) c_out<1>(C + TR, ldc, r0, c1, scaled, scale, scratch);
    if constexpr (RA == 2) c_out<2>(C2, ldc, r1, c0, scaled, scale, scratch);
    if constexpr (RA == 2 && RB == 2) c_out<3>(C2 + TR, ldc, r1, c1, scaled, scale, scratch);
}

template <class TA, class TB>
CT_AMX_TARGET void block(const Block& g, const TA* A, const TB* B) {
    // Each thread packs into its own buffers, kept for the thread's life (the pool's threads persist).
    thread_local Buffer a_buf = aligned(std::size_t(MC) * KCP);
    thread_local Buffer b_buf = aligned(std::size_t(NR) * KCP);
    // Loaded on every call, not once a thread: another library on this thread (oneDNN) may configure the tiles
    // its own way; released at the end, so a context switch saves no tile state.
    static const TileConfig config;
    _tile_loadconfig(&config);
    for (int pc = 0; pc < g.k; pc += KC) {
        const int kc = std::min(KC, g.k - pc), kcp = (kc + 1) / 2;
        const int steps = (kcp + TR - 1) / TR, kstride = steps * TR;
        const bool accumulate = pc > 0 || g.accumulate;
        const bool scaled = pc + KC >= g.k && g.alpha != 1.0f;  // (never with g.accumulate: gemm.cpp)
        for (int ic = g.m0; ic < g.m1; ic += MC) {
            const int mc = std::min(MC, g.m1 - ic);
            pack_a(A, g.lda, g.ta, pc, kc, ic, mc, kstride, a_buf.get());
            for (int j = g.n0; j < g.n1; j += NR) {
                const int nr = std::min(NR, g.n1 - j);
                pack_b(B, g.ldb, g.tb, pc, kc, j, nr, kstride, b_buf.get());
                const std::uint32_t* bp = b_buf.get();
                for (int i = 0; i < mc; i += 2 * TR) {
                    const std::uint32_t* ap = a_buf.get() + std::size_t(i / TR) * TR * KCP;
                    float* C = g.c + std::size_t(ic + i) * g.ldc + j;
                    const int mr = std::min(2 * TR, mc - i);
                    if (mr > TR && nr > TR)
                        tile_block<2, 2>(steps, ap, bp, C, g.ldc, mr, nr, accumulate, scaled, g.alpha);
                    else if (mr > TR)
                        tile_block<2, 1>(steps, ap, bp, C, g.ldc, mr, nr, accumulate, scaled, g.alpha);
                    else if (nr > TR)
                        tile_block<1, 2>(steps, ap, bp, C, g.ldc, mr, nr, accumulate, scaled, g.alpha);
                    else
                        tile_block<1, 1>(steps, ap, bp, C, g.ldc, mr, nr, accumulate, scaled, g.alpha);
                }
            }
        }
    }
    _tile_release();
}

}  // namespace

bool amx_bf16_permitted() {
    // Linux hands out AMX's 8 KB of tile state only on request, once for the whole process (arch_prctl
    // ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); without it the first tile instruction faults.
    constexpr int kReqXcompPerm = 0x1023, kXtiledata = 18;
    static const bool permitted = syscall(SYS_arch_prctl, kReqXcompPerm, kXtiledata) == 0;
    return permitted;
}

void amx_bf16_block(const Block& g) {
    if (g.a32 && g.b32) return block(g, g.a32, g.b32);
    if (g.a32) return block(g, g.a32, g.b16);
    if (g.b32) return block(g, g.a16, g.b32);
    return block(g, g.a16, g.b16);
}

}  // namespace ct::bf16_kernels

#else

namespace ct::bf16_kernels {
bool amx_bf16_permitted() { return false; }
// Never called: no x86-64 CPU, no AMX level.
void amx_bf16_block(const Block&) {}
}  // namespace ct::bf16_kernels

#endif
