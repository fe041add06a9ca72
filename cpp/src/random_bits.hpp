// Counter-based random numbers for dropout masks: element i of a mask draws from a hash of
// (seed, i), where the seed is one draw from the library generator (manual_seed) per call. Any
// thread can compute any element, so masks fill in parallel and reproduce exactly.
#pragma once
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

// keep[i] = 1 with probability 1 - p: a uniform u in [0, 1) on a 2^-16 grid compared with p (the
// kept fraction is within 2^-17 of 1 - p). One hash gives four draws: elements 4j .. 4j + 3 take
// its four 16-bit quarters.
inline void dropout_keep_mask(std::uint8_t* keep, std::size_t n, float p, std::uint64_t seed) {
    const std::uint32_t threshold = std::uint32_t(double(p) * 65536.0 + 0.5);  // u < p  <=>  bits < threshold
    const std::size_t quads = n / 4;
    parallel::parallel_for(quads, 16384, [keep, seed, threshold](std::size_t b, std::size_t e) {
        for (std::size_t j = b; j < e; ++j) {
            const std::uint64_t h = mix64(seed, j);
            for (int q = 0; q < 4; ++q) keep[4 * j + std::size_t(q)] = std::uint32_t((h >> (16 * q)) & 0xFFFF) >= threshold;
        }
    });
    if (quads * 4 < n) {  // the last few
        const std::uint64_t h = mix64(seed, quads);
        for (std::size_t i = quads * 4; i < n; ++i) keep[i] = std::uint32_t((h >> (16 * (i - quads * 4))) & 0xFFFF) >= threshold;
    }
}

}  // namespace ct::detail
