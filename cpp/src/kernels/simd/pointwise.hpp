// Plain element-wise loops (dropout's mask and scaling, ReLU) over a range of elements per call, per level
// (tables.hpp). Not xsimd: GCC vectorises them itself, for the level's vectors, and they are exact (selects,
// a multiply by exactly keep_scale or 0, integer hashing), so every level gives the same bits.
#pragma once
#include <cstddef>
#include <cstdint>

#include "tables.hpp"

namespace ct::kernels {

struct PointwiseLoops {
    // out[j] = (hash32((from + j) * 0x9E3779B9 + key) >> 8) >= threshold for j < count, in 32-bit
    // arithmetic (the counter wraps as the element index does): dropout's keep mask (random_bits.hpp), the
    // top 24 bits of a full-avalanche 32-bit hash (lowbias32) compared with threshold = p 2^24.
    void (*keep_mask)(std::uint8_t* out, std::uint32_t from, std::uint32_t count, std::uint32_t key,
                      std::uint32_t threshold);
    // y (+)= x (keep ? keep_scale : 0) over n elements: dropout's forward, and its backward with x the
    // gradient. accumulate adds to y instead of writing it.
    void (*scale_by_mask)(const float* x, const std::uint8_t* keep, float keep_scale, float* y, std::size_t n,
                          bool accumulate);
    // y = max(x, 0) over n floats (x > 0 ? x : 0).
    void (*relu_forward)(const float* x, float* y, std::size_t n);
    // dx (+)= (y > 0 ? g : 0) over n floats, from ReLU's output y: relu'(x) = 1 where the output is
    // positive. accumulate adds to dx instead of writing it.
    void (*relu_backward)(const float* y, const float* g, float* dx, std::size_t n, bool accumulate);
};

CT_LOOP_TABLES(PointwiseLoops, pointwise_loops)

}  // namespace ct::kernels
