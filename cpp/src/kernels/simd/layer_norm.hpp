// layer_norm along rows of D floats (ops/layer_norm.cpp), one row per call, per level (tables.hpp).
#pragma once
#include <cstddef>

#include "tables.hpp"

namespace ct::kernels {

struct LayerNormLoops {
    // mean = sum x / D; rstd = 1 / sqrt(sum (x - mean)^2 / D + eps) (the variance from the centred values,
    // two passes, as torch); y = (x - mean) rstd, times weight, plus bias (either may be null). Writes the
    // row's mean and rstd to *mean and *rstd.
    void (*forward_row)(const float* x, float* y, std::size_t D, const float* weight, const float* bias, float eps,
                        float* mean, float* rstd);
    // With xhat = (x - mean) rstd and dxhat = g weight (g if weight is null):
    //   pw += g xhat and pb += g (the chunk's partial dweight and dbias; either may be null), then, unless dx
    //   is null, dx (+)= rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)). accumulate adds to dx instead of
    //   writing it.
    void (*backward_row)(const float* x, const float* g, const float* weight, float mean, float rstd, std::size_t D,
                         float* pw, float* pb, float* dx, bool accumulate);
};

CT_LOOP_TABLES(LayerNormLoops, layer_norm_loops)

}  // namespace ct::kernels
