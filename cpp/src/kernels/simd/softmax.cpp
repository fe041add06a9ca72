// softmax.hpp's loops, for one level (tables.hpp). The partial last block is padded with -inf, whose exp
// adds 0 to the sum.
#include "softmax.hpp"

#include <cmath>
#include <limits>

#include "per_level.hpp"

namespace ct::kernels {
namespace CT_LOOP_LEVEL {

namespace {

using simd::B;

void forward_row(const float* x, float* y, std::size_t n, bool log) {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    const B mx(simd::max(x, n, kNegInf));
    B acc(0.0f);
    simd::blocks(n, [&](std::size_t i, std::size_t c) {
        const B e = xsimd::exp(simd::load(x + i, c, kNegInf) - mx);
        if (!log) simd::store(y + i, e, c);
        acc += e;
    });
    const float total = simd::hsum(acc);
    if (log) {
        // (x - max) - lse, not x - (max + lse): max + lse rounds at max's magnitude (x = [512, 512] gives
        // -0.693176 for log 1/2).
        const B lse(std::log(total));
        simd::blocks(n, [&](std::size_t i, std::size_t c) { simd::store(y + i, (simd::load(x + i, c) - mx) - lse, c); });
    } else {
        const B inv(1.0f / total);
        simd::blocks(n, [&](std::size_t i, std::size_t c) { simd::store(y + i, simd::load(y + i, c) * inv, c); });
    }
}

void backward_row(const float* y, const float* g, float* dx, std::size_t n, bool log, bool accumulate) {
    B acc(0.0f);
    simd::blocks(n, [&](std::size_t i, std::size_t c) {
        acc += log ? simd::load(g + i, c) : simd::load(g + i, c) * simd::load(y + i, c);
    });
    const B s(simd::hsum(acc));
    simd::blocks(n, [&](std::size_t i, std::size_t c) {
        const B gi = simd::load(g + i, c), yi = simd::load(y + i, c);
        B v = log ? gi - xsimd::exp(yi) * s : yi * (gi - s);
        if (accumulate) v += simd::load(dx + i, c);
        simd::store(dx + i, v, c);
    });
}

}  // namespace
}  // namespace CT_LOOP_LEVEL

CT_LOOP_TABLE(SoftmaxLoops, softmax_loops) = {CT_LOOP_LEVEL::forward_row, CT_LOOP_LEVEL::backward_row};
CT_LOOP_SELECT(SoftmaxLoops, softmax_loops)

}  // namespace ct::kernels
