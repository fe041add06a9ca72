// layer_norm.hpp's loops, for one level (tables.hpp).
#include "layer_norm.hpp"

#include <cmath>

#include "per_level.hpp"

namespace ct::kernels {
namespace CT_LOOP_LEVEL {

namespace {

using simd::B;

void forward_row(const float* xr, float* y, std::size_t D, const float* w, const float* bi, float eps, float* mean,
                 float* rstd) {
    const float mu = simd::sum(xr, D) / float(D);
    const B bmu(mu);
    B acc(0.0f);  // the variance from the centred values, as torch (two passes)
    simd::blocks(D, [&](std::size_t j, std::size_t c) {
        const B d = simd::load(xr + j, c, mu) - bmu;
        acc += d * d;
    });
    const float rs = 1.0f / std::sqrt(simd::hsum(acc) / float(D) + eps);
    *mean = mu;
    *rstd = rs;
    const B brs(rs);
    simd::blocks(D, [&](std::size_t j, std::size_t c) {
        B v = (simd::load(xr + j, c) - bmu) * brs;
        if (w) v *= simd::load(w + j, c);
        if (bi) v += simd::load(bi + j, c);
        simd::store(y + j, v, c);
    });
}

// With xhat = (x - mean) * rstd and dxhat = g * weight, per row of D elements:
//   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),
//   dweight += g * xhat, dbias += g (into the chunk's partial sums pw, pb).
void backward_row(const float* xr, const float* gr, const float* w, float mean, float rstd, std::size_t D, float* pw,
                  float* pb, float* dx, bool accumulate) {
    const B mu(mean), rs(rstd);
    B s1(0.0f), s2(0.0f);
    simd::blocks(D, [&](std::size_t j, std::size_t c) {
        const B xhat = (simd::load(xr + j, c) - mu) * rs;
        const B gj = simd::load(gr + j, c);
        const B dxhat = w ? gj * simd::load(w + j, c) : gj;
        s1 += dxhat;
        s2 += dxhat * xhat;
        if (pw) simd::store(pw + j, simd::load(pw + j, c) + gj * xhat, c);
        if (pb) simd::store(pb + j, simd::load(pb + j, c) + gj, c);
    });
    if (!dx) return;
    const B m1(simd::hsum(s1) / float(D)), m2(simd::hsum(s2) / float(D));
    simd::blocks(D, [&](std::size_t j, std::size_t c) {
        const B xhat = (simd::load(xr + j, c) - mu) * rs;
        const B gj = simd::load(gr + j, c);
        const B dxhat = w ? gj * simd::load(w + j, c) : gj;
        B v = rs * (dxhat - m1 - xhat * m2);
        if (accumulate) v += simd::load(dx + j, c);
        simd::store(dx + j, v, c);
    });
}

}  // namespace
}  // namespace CT_LOOP_LEVEL

CT_LOOP_TABLE(LayerNormLoops, layer_norm_loops) = {CT_LOOP_LEVEL::forward_row, CT_LOOP_LEVEL::backward_row};
CT_LOOP_SELECT(LayerNormLoops, layer_norm_loops)

}  // namespace ct::kernels
