// Counter-based random numbers for dropout masks: element i of a mask draws from a hash of
// (seed, i), where the seed is one draw from the library generator (manual_seed) per call. Any
// thread can compute any element, so masks fill in parallel and reproduce exactly.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "../kernels/simd/pointwise.hpp"
#include "parallel.hpp"

namespace ct::detail {

// keep[i] = 1 with probability 1 - p: a uniform u in [0, 1) on a 2^-24 grid (float32's resolution,
// as a float uniform draw), the top 24 bits of hash32(i * golden + key), compared with p. The key
// is 32 bits of the call's seed. `first` is the index of keep[0] in the whole mask: a process of a
// data-parallel job draws its rows of the global batch's mask (ct::distributed::BatchShard).
//
// The loop and its measurements: kernels/simd/pointwise.cpp (keep_mask, compiled per kernel level).
inline void dropout_keep_mask(std::uint8_t* keep, std::size_t n, float p, std::uint64_t seed,
                              std::uint64_t first = 0) {
    const std::uint32_t threshold = std::uint32_t(double(p) * double(1u << 24) + 0.5);  // u < p  <=>  bits < threshold
    const std::uint32_t key = std::uint32_t(seed ^ (seed >> 32));
    const auto keep_mask = kernels::pointwise_loops().keep_mask;
    parallel::parallel_for(n, 65536, [keep, key, threshold, first, keep_mask](std::size_t b, std::size_t e) {
        // Element i hashes uint32(i), so the counter may wrap as the index does; a 32-bit loop
        // counter is what lets GCC vectorise (a size_t one runs 1.5-2x slower), so long ranges go
        // in 2^30-element pieces.
        constexpr std::size_t piece = std::size_t(1) << 30;
        for (std::size_t start = b; start < e; start += piece) {
            const std::uint32_t from = std::uint32_t(first + start), count = std::uint32_t(std::min(piece, e - start));
            keep_mask(keep + start, from, count, key, threshold);
        }
    });
}

}  // namespace ct::detail
