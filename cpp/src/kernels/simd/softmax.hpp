// softmax and log_softmax along rows (ops/softmax.cpp), one row per call, per level (tables.hpp).
#pragma once
#include <cstddef>

#include "tables.hpp"

namespace ct::kernels {

struct SoftmaxLoops {
    // y = softmax(x) or log_softmax(x) over n floats. A row of all -inf gives NaN, as torch does.
    void (*forward_row)(const float* x, float* y, std::size_t n, bool log);
    // dx (+)= the gradient given the forward's output y and the incoming g: softmax: y (g - sum g y);
    // log_softmax: g - exp(y) sum g. accumulate adds to dx instead of writing it.
    void (*backward_row)(const float* y, const float* g, float* dx, std::size_t n, bool log, bool accumulate);
};

CT_LOOP_TABLES(SoftmaxLoops, softmax_loops)

}  // namespace ct::kernels
