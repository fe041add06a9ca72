// cross_entropy.hpp's loops, for one level (tables.hpp). The log-sum-exp's partial last block is padded
// with -inf, whose exp adds 0 to the sum.
#include "cross_entropy.hpp"

#include <cmath>

#include "per_level.hpp"

namespace ct::kernels {
namespace CT_LOOP_LEVEL {

namespace {

using simd::B;

float log_sum_exp(const float* x, std::size_t n) {
    constexpr float kNegInf = -INFINITY;
    const float mx = simd::max(x, n, kNegInf);
    const B bmx(mx);
    B acc(0.0f);
    simd::blocks(n, [&](std::size_t c0, std::size_t c) { acc += xsimd::exp(simd::load(x + c0, c, kNegInf) - bmx); });
    return mx + std::log(simd::hsum(acc));
}

float sum(const float* x, std::size_t n) { return simd::sum(x, n); }

// p is recomputed from the logits and the row's saved log-sum-exp (an (N, C) array fewer than saving p).
void backward_row(const float* x, float* dx, std::size_t n, std::int64_t target, float w, float lse, float smoothing,
                  bool accumulate) {
    const B bw(w), shift(lse), floor_q(smoothing / float(n));
    simd::blocks(n, [&](std::size_t c0, std::size_t c) {
        B v = bw * (xsimd::exp(simd::load(x + c0, c) - shift) - floor_q);
        if (accumulate) v += simd::load(dx + c0, c);
        simd::store(dx + c0, v, c);
    });
    dx[target] -= w * (1.0f - smoothing);
}

}  // namespace
}  // namespace CT_LOOP_LEVEL

CT_LOOP_TABLE(CrossEntropyLoops, cross_entropy_loops) = {CT_LOOP_LEVEL::log_sum_exp, CT_LOOP_LEVEL::sum,
                                                         CT_LOOP_LEVEL::backward_row};
CT_LOOP_SELECT(CrossEntropyLoops, cross_entropy_loops)

}  // namespace ct::kernels
