// GELU (tanh form) forward and backward (ops/activation.cpp), over a range of floats per call, per level
// (tables.hpp).
#pragma once
#include <cstddef>

#include "tables.hpp"

namespace ct::kernels {

struct ActivationLoops {
    // y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) over n floats.
    void (*gelu_forward)(const float* x, float* y, std::size_t n);
    // dx (+)= g gelu'(x) over n floats, with u = sqrt(2/pi) (x + c x^3), t = tanh(u), c = 0.044715:
    // gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 c x^2). accumulate adds to dx instead of
    // writing it.
    void (*gelu_backward)(const float* x, const float* g, float* dx, std::size_t n, bool accumulate);
};

CT_LOOP_TABLES(ActivationLoops, activation_loops)

}  // namespace ct::kernels
