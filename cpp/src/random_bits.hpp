// Counter-based random numbers for dropout masks: element i of a mask draws from a hash of
// (seed, i), where the seed is one draw from the library generator (manual_seed) per call. Any
// thread can compute any element, so masks fill in parallel and reproduce exactly.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

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
// is 32 bits of the call's seed. `first` is the index of keep[0] in the whole mask: a process of a
// data-parallel job draws its rows of the global batch's mask (ct::distributed::BatchShard).
//
// A plain loop on purpose: with a 32-bit counter GCC vectorises it for whatever the target has
// (1 MiB of mask: 85 us with AVX-512, 200 us with AVX2, 400 us with SSE4.2, 790 us with SSE2 on
// this machine's EPYC). A hand-written AVX2 version (pdep to spread the comparison bits into
// bytes) was 15% faster on AVX2 only, half as fast as this loop with AVX-512, and pdep is
// microcoded (hundreds of cycles) on AMD Zen 1/2.
inline void dropout_keep_mask(std::uint8_t* keep, std::size_t n, float p, std::uint64_t seed,
                              std::uint64_t first = 0) {
    const std::uint32_t threshold = std::uint32_t(double(p) * double(1u << 24) + 0.5);  // u < p  <=>  bits < threshold
    const std::uint32_t key = std::uint32_t(seed ^ (seed >> 32));
    parallel::parallel_for(n, 65536, [keep, key, threshold, first](std::size_t b, std::size_t e) {
        // Element i hashes uint32(i), so the counter may wrap as the index does; a 32-bit loop
        // counter is what lets GCC vectorise (a size_t one ran 1.5-2x slower), so long ranges go
        // in 2^30-element pieces.
        constexpr std::size_t piece = std::size_t(1) << 30;
        for (std::size_t start = b; start < e; start += piece) {
            const std::uint32_t from = std::uint32_t(first + start), count = std::uint32_t(std::min(piece, e - start));
            std::uint8_t* out = keep + start;
            for (std::uint32_t j = 0; j < count; ++j)
                out[j] = (hash32((from + j) * 0x9E3779B9u + key) >> 8) >= threshold;
        }
    });
}

}  // namespace ct::detail
