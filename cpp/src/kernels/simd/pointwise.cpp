// pointwise.hpp's loops, for one level (tables.hpp): plain loops that GCC vectorises for the level's
// vectors (compiled here per level, they run AVX2 or AVX-512 even in a build for plain x86-64).
#include "pointwise.hpp"

#include <cstddef>
#include <cstdint>

#include "per_level.hpp"

namespace ct::kernels {
namespace CT_LOOP_LEVEL {

namespace {

// A 32-bit integer hash with full avalanche (Chris Wellons' "lowbias32", bijective): 32-bit
// multiplies only, so a loop over it vectorises (AVX2 has 32-bit but no 64-bit vector multiply).
// Defined here, per level: an inline function in a shared header would be one symbol for every level.
std::uint32_t hash32(std::uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

// Dropout's keep mask (random_bits.hpp): keep[i] = 1 with probability 1 - p, from the top 24 bits of
// hash32(i * golden + key) compared with threshold.
//
// A plain loop on purpose: with a 32-bit counter GCC vectorises it for whatever the target has
// (1 MiB of mask: 85 us with AVX-512, 200 us with AVX2, 400 us with SSE4.2, 790 us with SSE2 on
// this machine's EPYC). A hand-written AVX2 version (pdep to spread the comparison bits into
// bytes) is 15% faster on AVX2 only, half as fast as this loop with AVX-512, and pdep is
// microcoded (hundreds of cycles) on AMD Zen 1/2. A size_t loop counter runs 1.5-2x slower.
void keep_mask(std::uint8_t* out, std::uint32_t from, std::uint32_t count, std::uint32_t key,
               std::uint32_t threshold) {
    for (std::uint32_t j = 0; j < count; ++j)
        out[j] = (hash32((from + j) * 0x9E3779B9u + key) >> 8) >= threshold;
}

// y (+)= x (keep ? keep_scale : 0): dropout's forward and backward.
void scale_by_mask(const float* x, const std::uint8_t* keep, float keep_scale, float* y, std::size_t n,
                   bool accumulate) {
    if (accumulate)
        for (std::size_t i = 0; i < n; ++i) y[i] += x[i] * (keep[i] ? keep_scale : 0.0f);
    else
        for (std::size_t i = 0; i < n; ++i) y[i] = x[i] * (keep[i] ? keep_scale : 0.0f);
}

void relu_forward(const float* x, float* y, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
        const float v = x[i];
        y[i] = v > 0.0f ? v : 0.0f;
    }
}

// relu'(x) = 1 where the output is positive.
void relu_backward(const float* y, const float* g, float* dx, std::size_t n, bool accumulate) {
    // Both loads unconditional, then a select: the loop vectorises (a conditional load
    // compiled to a branch per element).
    if (accumulate)
        for (std::size_t i = 0; i < n; ++i) {
            const float v = g[i];
            dx[i] += y[i] > 0.0f ? v : 0.0f;
        }
    else
        for (std::size_t i = 0; i < n; ++i) {
            const float v = g[i];
            dx[i] = y[i] > 0.0f ? v : 0.0f;
        }
}

}  // namespace
}  // namespace CT_LOOP_LEVEL

CT_LOOP_TABLE(PointwiseLoops, pointwise_loops) = {CT_LOOP_LEVEL::keep_mask, CT_LOOP_LEVEL::scale_by_mask,
                                                  CT_LOOP_LEVEL::relu_forward, CT_LOOP_LEVEL::relu_backward};
CT_LOOP_SELECT(PointwiseLoops, pointwise_loops)

}  // namespace ct::kernels
