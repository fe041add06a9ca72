// The AMX-INT8 int8 kernel (int8.hpp), for CPUs with Intel's tile unit (the "amx" kernel level). tdpbssd
// multiplies a 16 x 64 by a 64 x 16 tile of signed bytes into 16 x 16 exact int32 sums: the same sums as every
// other kernel, so the same float32 results to the bit. The weight's packing is already a B tile's layout (a
// 16-column panel, rows of 4 values of k for each column: Int8Weight), so B tiles load straight from it, and A
// tiles from the quantised rows (16 rows of 64 values). C is computed in 32 x 32 blocks: four accumulator tiles,
// two A and two B tiles. The last step of k (fewer than 64 values left) goes through zero-padded copies; so do
// the rows of a part block (a tile always loads 16 rows). Up to 8 rows (decoding a few sequences, bound by
// reading the weight) take the AVX512_VNNI kernel. Compiled with function target attributes; linear_int8 calls
// it only at the amx level.
#include "kernels.hpp"

#if defined(__x86_64__)
// GCC 12's AVX-512 headers start masked intrinsics from an "undefined" vector (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#define CT_AMX_INT8_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,amx-tile,amx-int8")))

namespace ct::int8_kernels {

namespace {

constexpr int TR = 16;           // rows of a tile; columns of C's tiles; 4-value groups of k in a step
constexpr int STEP = 64;         // values of k a step
constexpr std::size_t kAmxMinRows = 9;   // fewer rows: the AVX512_VNNI kernel (kernels/split.hpp's kFewRows + 1)

// Tiles 0-3: C's 32 x 32 block (0: rows 0-15, columns 0-15; 1: rows 0-15, columns 16-31; 2, 3: rows 16-31);
// 4, 5: A's two 16-row halves; 6, 7: B's two 16-column panels. Each 16 rows of 64 bytes.
struct alignas(64) TileConfig {
    std::uint8_t palette = 1, start_row = 0;
    std::uint8_t reserved[14] = {};
    std::uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
    std::uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

CT_AMX_INT8_TARGET inline __mmask16 first(std::size_t cnt) {
    return cnt >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cnt) - 1u);
}

// The sums of rows [row, row + rows) by columns [c, c + cols) (each at most 16), laid out 16 x 16: into y, as
// the VNNI kernel's epilogue computes it (the same operations in the same order), or into acc_out.
CT_AMX_INT8_TARGET void store(const Problem& p, const std::int32_t* sums, std::size_t row, std::size_t rows,
                              std::size_t c, std::size_t cols) {
    const Int8Weight& w = *p.w;
    const __mmask16 k = first(cols);
    if (p.acc_out) {
        for (std::size_t r = 0; r < rows; ++r)
            _mm512_mask_storeu_epi32(p.acc_out + (row + r) * w.out_features + c, k, _mm512_load_si512(sums + r * TR));
        return;
    }
    const __m512 ws = _mm512_maskz_loadu_ps(k, w.scale.data() + c);
    const __m512 bias = p.bias ? _mm512_maskz_loadu_ps(k, p.bias + c) : _mm512_setzero_ps();
    for (std::size_t r = 0; r < rows; ++r) {
        const __m512 s = _mm512_mul_ps(_mm512_set1_ps(p.row_scale[row + r]), ws);
        __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums + r * TR)), s);
        if (p.bias) y = _mm512_add_ps(y, bias);
        _mm512_mask_storeu_ps(p.y + (row + r) * p.ldy + c, k, y);
    }
}

}  // namespace

CT_AMX_INT8_TARGET void amx_int8(const Problem& p, std::size_t n0, std::size_t n1) {
    if (p.m < kAmxMinRows) return avx512_vnni(p, n0, n1);
    const Int8Weight& w = *p.w;
    const std::size_t kg = w.k_groups(), steps = kg / TR, tail = kg % TR;   // tail: 4-value groups of the last step
    const std::size_t lda = p.lda;
    alignas(64) std::int8_t a_part[2 * TR * STEP];       // the last step's values of up to 32 rows, zero-padded
    alignas(64) std::int8_t b_part[2 * TR * STEP];       // and of two panels' columns
    alignas(64) std::int32_t sums[TR * TR];
    // A part block of rows (fewer than 32, from the 17th on, or fewer than 16): copied whole, zero-padded.
    thread_local std::vector<std::int8_t> rows_part;
    static const TileConfig config;
    _tile_loadconfig(&config);   // at every call (another library may configure the tiles), released at its end
    for (std::size_t n = n0; n < n1; n += 2 * TR) {
        const std::size_t cols = std::min<std::size_t>(2 * TR, n1 - n);
        const std::int8_t* b0 = w.packed.data() + (n / TR) * kg * 64;
        const std::int8_t* b1 = b0 + kg * 64;   // (read only when cols > 16: the panel exists)
        if (tail) {
            std::memset(b_part, 0, sizeof b_part);
            std::memcpy(b_part, b0 + steps * TR * 64, tail * 64);
            if (cols > TR) std::memcpy(b_part + TR * 64, b1 + steps * TR * 64, tail * 64);
        }
        for (std::size_t row = 0; row < p.m; row += 2 * TR) {
            const std::size_t rows = std::min<std::size_t>(2 * TR, p.m - row);
            const std::int8_t* a0 = p.qx + row * lda;
            if (rows != 2 * TR && rows != TR) {   // a tile loads 16 rows: copy the part block's rows, zero-padded
                rows_part.assign((rows > TR ? 2 : 1) * TR * lda, 0);
                std::memcpy(rows_part.data(), a0, rows * lda);
                a0 = rows_part.data();
            }
            const std::int8_t* a1 = a0 + TR * lda;
            if (tail) {
                std::memset(a_part, 0, sizeof a_part);
                for (std::size_t r = 0; r < std::min<std::size_t>(rows, 2 * TR); ++r)
                    std::memcpy(a_part + r * STEP, a0 + r * lda + steps * STEP, tail * 4);
            }
            const bool two_rows = rows > TR, two_cols = cols > TR;
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (std::size_t s = 0; s <= steps; ++s) {
                if (s == steps && !tail) break;
                const bool last = s == steps;
                const std::int8_t* at0 = last ? a_part : a0 + s * STEP;
                const std::int8_t* at1 = last ? a_part + TR * STEP : a1 + s * STEP;
                const std::size_t a_stride = last ? STEP : lda;
                const std::int8_t* bt0 = last ? b_part : b0 + s * TR * 64;
                const std::int8_t* bt1 = last ? b_part + TR * 64 : b1 + s * TR * 64;
                _tile_loadd(4, at0, a_stride);
                _tile_loadd(6, bt0, 64);
                _tile_dpbssd(0, 4, 6);
                if (two_cols) {
                    _tile_loadd(7, bt1, 64);
                    _tile_dpbssd(1, 4, 7);
                }
                if (two_rows) {
                    _tile_loadd(5, at1, a_stride);
                    _tile_dpbssd(2, 5, 6);
                    if (two_cols) _tile_dpbssd(3, 5, 7);
                }
            }
            const std::size_t r0 = std::min<std::size_t>(rows, TR), c0 = std::min<std::size_t>(cols, TR);
            _tile_stored(0, sums, 64);
            store(p, sums, row, r0, n, c0);
            if (two_cols) {
                _tile_stored(1, sums, 64);
                store(p, sums, row, r0, n + TR, cols - TR);
            }
            if (two_rows) {
                _tile_stored(2, sums, 64);
                store(p, sums, row + TR, rows - TR, n, c0);
                if (two_cols) {
                    _tile_stored(3, sums, 64);
                    store(p, sums, row + TR, rows - TR, n + TR, cols - TR);
                }
            }
        }
    }
    _tile_release();
}

}  // namespace ct::int8_kernels

#endif
