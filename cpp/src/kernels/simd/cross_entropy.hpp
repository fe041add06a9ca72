// cross_entropy's row loops (loss/cross_entropy.cpp), one row of C logits per call, per level (tables.hpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "tables.hpp"

namespace ct::kernels {

struct CrossEntropyLoops {
    // lse = max + log sum exp(x - max) over n floats (log p = x - lse).
    float (*log_sum_exp)(const float* x, std::size_t n);
    // sum of n floats (the smoothing term: sum_c log p_c = sum_c x_c - C lse).
    float (*sum)(const float* x, std::size_t n);
    // dx (+)= w (p - q) over n classes, with p = exp(x - lse) and the smoothed target
    // q = (1 - smoothing) onehot(target) + smoothing / n. accumulate adds to dx instead of writing it.
    void (*backward_row)(const float* x, float* dx, std::size_t n, std::int64_t target, float w, float lse,
                         float smoothing, bool accumulate);
};

CT_LOOP_TABLES(CrossEntropyLoops, cross_entropy_loops)

}  // namespace ct::kernels
