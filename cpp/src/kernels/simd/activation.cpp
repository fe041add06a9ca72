// activation.hpp's loops, for one level (tables.hpp). The partial last block is padded with 0 and its
// extra lanes are never stored.
#include "activation.hpp"

#include "per_level.hpp"

namespace ct::kernels {
namespace CT_LOOP_LEVEL {

namespace {

using simd::B;

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;

// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + c x^3))).
void gelu_forward(const float* x, float* y, std::size_t n) {
    simd::blocks(n, [&](std::size_t i, std::size_t c) {
        const B xi = simd::load(x + i, c);
        const B t = xsimd::tanh(B(kSqrt2OverPi) * (xi + B(kGeluCoeff) * xi * xi * xi));
        simd::store(y + i, B(0.5f) * xi * (B(1.0f) + t), c);
    });
}

// With u = sqrt(2/pi) (x + c x^3) and t = tanh(u):
// gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 c x^2).
void gelu_backward(const float* x, const float* g, float* dx, std::size_t n, bool accumulate) {
    simd::blocks(n, [&](std::size_t i, std::size_t c) {
        const B xi = simd::load(x + i, c);
        const B x2 = xi * xi;
        const B t = xsimd::tanh(B(kSqrt2OverPi) * (xi + B(kGeluCoeff) * x2 * xi));
        const B local = B(0.5f) * (B(1.0f) + t) +
                        B(0.5f) * xi * (B(1.0f) - t * t) * B(kSqrt2OverPi) * (B(1.0f) + B(3.0f * kGeluCoeff) * x2);
        B v = simd::load(g + i, c) * local;
        if (accumulate) v += simd::load(dx + i, c);
        simd::store(dx + i, v, c);
    });
}

}  // namespace
}  // namespace CT_LOOP_LEVEL

CT_LOOP_TABLE(ActivationLoops, activation_loops) = {CT_LOOP_LEVEL::gelu_forward, CT_LOOP_LEVEL::gelu_backward};
CT_LOOP_SELECT(ActivationLoops, activation_loops)

}  // namespace ct::kernels
