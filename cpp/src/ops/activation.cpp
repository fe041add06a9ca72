#include "ctransformer/ops/activation.hpp"

#include <cmath>

#include "../parallel.hpp"
#include "../simd.hpp"
#include "ctransformer/autograd.hpp"

namespace ct {

namespace {

using simd::B;
constexpr std::size_t kGrain = 16384;      // elements per thread, cheap pointwise work
constexpr std::size_t kGrainTanh = 4096;   // with a tanh per element

// relu'(x) = 1 where the output is positive.
struct ReluBackward : Node {
    Tensor out;
    const char* name() const override { return "relu"; }
    void backward(const Array& g) override {
        GradBuffer gx = grad_buffer(inputs[0]);
        if (!gx) return;
        const float* y = out.data();
        const float* pg = g.data();
        float* d = gx.data;
        const bool acc = gx.accumulate;
        parallel::parallel_for(g.size(), kGrain, [y, pg, d, acc](std::size_t b, std::size_t e) {
            // Both loads unconditional, then a select: the loop vectorises (a conditional load
            // compiled to a branch per element).
            if (acc)
                for (std::size_t i = b; i < e; ++i) {
                    const float v = pg[i];
                    d[i] += y[i] > 0.0f ? v : 0.0f;
                }
            else
                for (std::size_t i = b; i < e; ++i) {
                    const float v = pg[i];
                    d[i] = y[i] > 0.0f ? v : 0.0f;
                }
        });
    }
    void release_saved() override { out = Tensor(); }
};

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;

// With u = sqrt(2/pi) (x + c x^3) and t = tanh(u):
// gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 c x^2).
struct GeluBackward : Node {
    const char* name() const override { return "gelu"; }
    void backward(const Array& g) override {
        GradBuffer gx = grad_buffer(inputs[0]);
        if (!gx) return;
        const float* x = inputs[0].data();
        const float* pg = g.data();
        float* d = gx.data;
        parallel::parallel_for(g.size(), kGrainTanh, [&](std::size_t b, std::size_t e) {
            simd::blocks(e - b, [&](std::size_t i, std::size_t c) {
                i += b;
                const B xi = simd::load(x + i, c);
                const B x2 = xi * xi;
                const B t = xsimd::tanh(B(kSqrt2OverPi) * (xi + B(kGeluCoeff) * x2 * xi));
                const B local = B(0.5f) * (B(1.0f) + t) +
                                B(0.5f) * xi * (B(1.0f) - t * t) * B(kSqrt2OverPi) * (B(1.0f) + B(3.0f * kGeluCoeff) * x2);
                B v = simd::load(pg + i, c) * local;
                if (gx.accumulate) v += simd::load(d + i, c);
                simd::store(d + i, v, c);
            });
        });
    }
};

}  // namespace

Tensor relu(const Tensor& x) {
    Tensor out(Array::from_shape(x.array().shape()));
    const float* px = x.data();
    float* y = out.data();
    parallel::parallel_for(x.numel(), kGrain, [px, y](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i) {
            const float v = px[i];
            y[i] = v > 0.0f ? v : 0.0f;
        }
    });
    if (needs_grad({&x})) {
        auto node = std::make_shared<ReluBackward>();
        node->out = out.detach();
        attach(out, node, {&x});
    }
    return out;
}

Tensor gelu(const Tensor& x) {
    Tensor out(Array::from_shape(x.array().shape()));
    const float* px = x.data();
    float* y = out.data();
    parallel::parallel_for(x.numel(), kGrainTanh, [&](std::size_t b, std::size_t e) {
        simd::blocks(e - b, [&](std::size_t i, std::size_t c) {
            i += b;
            const B xi = simd::load(px + i, c);
            const B t = xsimd::tanh(B(kSqrt2OverPi) * (xi + B(kGeluCoeff) * xi * xi * xi));
            simd::store(y + i, B(0.5f) * xi * (B(1.0f) + t), c);
        });
    });
    if (needs_grad({&x})) attach(out, std::make_shared<GeluBackward>(), {&x});
    return out;
}

}  // namespace ct
