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

// keep[i] = 1 with probability 1 - p: a uniform u in [0, 1) on a 2^-24 grid (float32's
// resolution, as a float uniform draw) compared with p. One hash gives two draws: elements 2j and
// 2j + 1 take the top 24 bits of the hash's upper and lower halves.
inline void dropout_keep_mask(std::uint8_t* keep, std::size_t n, float p, std::uint64_t seed) {
    const std::uint32_t threshold = std::uint32_t(double(p) * double(1u << 24) + 0.5);  // u < p  <=>  bits < threshold
    const std::size_t pairs = (n + 1) / 2;
    parallel::parallel_for(pairs, 16384, [keep, n, seed, threshold](std::size_t b, std::size_t e) {
        for (std::size_t j = b; j < e; ++j) {
            const std::uint64_t h = mix64(seed, j);
            keep[2 * j] = std::uint32_t(h >> 40) >= threshold;
            if (2 * j + 1 < n) keep[2 * j + 1] = (std::uint32_t(h) >> 8) >= threshold;
        }
    });
}

}  // namespace ct::detail
