// Counter-based random numbers for dropout masks: element i of a mask draws from a hash of
// (seed, i), where the seed is one draw from the library generator (manual_seed) per call. Any
// thread can compute any element, so masks fill in parallel and reproduce exactly.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__AVX2__) && defined(__BMI2__)
#include <immintrin.h>
#endif

#include "parallel.hpp"

namespace ct::detail {

// splitmix64's finaliser over seed + (i + 1) * golden ratio: a bijective, well-mixed hash.
inline std::uint64_t mix64(std::uint64_t seed, std::uint64_t i) {
    std::uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// A 32-bit integer hash with full avalanche (Chris Wellons' "lowbias32", bijective): 32-bit
// multiplies only, so a loop over it vectorises (AVX2 has 32-bit but no 64-bit vector multiply).
inline std::uint32_t hash32(std::uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

// keep[i] = 1 with probability 1 - p: a uniform u in [0, 1) on a 2^-24 grid (float32's resolution,
// as a float uniform draw), the top 24 bits of hash32(i * golden + key), compared with p. The key
// is 32 bits of the call's seed; the loop vectorises (8 elements per step with AVX2).
inline void dropout_keep_mask(std::uint8_t* keep, std::size_t n, float p, std::uint64_t seed) {
    const std::uint32_t threshold = std::uint32_t(double(p) * double(1u << 24) + 0.5);  // u < p  <=>  bits < threshold
    const std::uint32_t key = std::uint32_t(seed ^ (seed >> 32));
    parallel::parallel_for(n, 65536, [keep, key, threshold](std::size_t b, std::size_t e) {
        std::size_t i = b;
#if defined(__AVX2__) && defined(__BMI2__)
        // Eight at a time: the hash in 32-bit lanes, the eight comparisons as a byte mask spread
        // to eight 0/1 bytes (pdep) in one store. Same values as the scalar loop below.
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i golden = _mm256_set1_epi32(int(0x9E3779B9u)), vkey = _mm256_set1_epi32(int(key));
        const __m256i m1 = _mm256_set1_epi32(0x7feb352d), m2 = _mm256_set1_epi32(int(0x846ca68bu));
        const __m256i below = _mm256_set1_epi32(int(threshold));  // compare (x >> 8) >= threshold, both < 2^24
        for (; i + 8 <= e; i += 8) {
            __m256i x = _mm256_add_epi32(_mm256_set1_epi32(int(std::uint32_t(i))), lane);
            x = _mm256_add_epi32(_mm256_mullo_epi32(x, golden), vkey);
            x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
            x = _mm256_mullo_epi32(x, m1);
            x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
            x = _mm256_mullo_epi32(x, m2);
            x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
            const __m256i dropped = _mm256_cmpgt_epi32(below, _mm256_srli_epi32(x, 8));  // (x >> 8) < threshold
            const unsigned bits = ~unsigned(_mm256_movemask_ps(_mm256_castsi256_ps(dropped))) & 0xFFu;
            const std::uint64_t bytes = _pdep_u64(bits, 0x0101010101010101ull);
            std::memcpy(keep + i, &bytes, 8);
        }
#endif
        for (; i < e; ++i) keep[i] = (hash32(std::uint32_t(i) * 0x9E3779B9u + key) >> 8) >= threshold;
    });
}

}  // namespace ct::detail
