// The AVX2 int8 kernel (kernel_ymm.inc with vpmaddubsw), for x86-64 CPUs without VNNI, and the AVX2
// quantisation of activation rows, used by both 8-lane kernels.
#include <algorithm>

#include "kernels.hpp"

#if defined(__x86_64__)
#include <immintrin.h>

#define CT_INT8_TARGET __attribute__((target("avx2,fma")))
#define CT_INT8_VNNI 0
#define CT_INT8_NAME avx2
#include "kernel_ymm.inc"

namespace ct::int8_kernels {

CT_INT8_TARGET void quantize_row_avx2(const float* x, std::size_t cols, std::int8_t* q, float* scale) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
    __m256i amax = _mm256_setzero_si256();
    std::size_t i = 0;
    for (; i + 8 <= cols; i += 8)
        amax = _mm256_max_epu32(amax, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)),
                                                       abs_mask));
    alignas(32) std::uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), amax);
    std::uint32_t amax_bits = *std::max_element(lanes, lanes + 8);
    for (std::size_t j = i; j < cols; ++j) {
        std::uint32_t u;
        __builtin_memcpy(&u, x + j, 4);
        amax_bits = std::max(amax_bits, u & 0x7FFFFFFFu);
    }
    const RowRange r = row_range(amax_bits);
    *scale = r.scale;
    if (!r.nonzero_finite) {
        std::fill_n(q, cols, std::int8_t(0));
        return;
    }
    const __m256 inv = _mm256_set1_ps(r.inv);
    for (i = 0; i + 8 <= cols; i += 8) {
        // |x inv| <= 127 rounds to an int32 that fits a byte, so the saturating packs change nothing: 32 -> 16
        // -> 8 bits within each 128-bit half (lanes 0-3 in the low half's first 4 bytes, 4-7 in the high's).
        const __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
        const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(v, v), _mm256_setzero_si256());
        const __m128i eight = _mm_unpacklo_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(q + i), eight);
    }
    for (; i < cols; ++i) q[i] = std::int8_t(__builtin_nearbyintf(x[i] * r.inv));
}

}  // namespace ct::int8_kernels

#endif
