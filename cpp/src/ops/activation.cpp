#include "ctransformer/ops/activation.hpp"

#include <cmath>

#include "../runtime/parallel.hpp"
#include "../kernels/simd/activation.hpp"
#include "../kernels/simd/pointwise.hpp"
#include "ctransformer/runtime/autograd.hpp"

namespace ct {

namespace {

constexpr std::size_t kGrain = 16384;      // elements per thread, cheap pointwise work
constexpr std::size_t kGrainTanh = 4096;   // with a tanh per element

// relu'(x) = 1 where the output is positive, on the kernel level's loops (kernels/simd/pointwise.cpp), split
// over threads.
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
        const auto relu_backward = kernels::pointwise_loops().relu_backward;
        parallel::parallel_for(g.size(), kGrain, [&](std::size_t b, std::size_t e) {
            relu_backward(y + b, pg + b, d + b, e - b, acc);
        });
    }
    void release_saved() override { out = Tensor(); }
};

// dx = g gelu'(x), the tanh form's derivative (kernels/simd/activation.hpp), on the kernel level's vector
// loops (kernels/simd/activation.cpp), split over threads.
struct GeluBackward : Node {
    const char* name() const override { return "gelu"; }
    void backward(const Array& g) override {
        GradBuffer gx = grad_buffer(inputs[0]);
        if (!gx) return;
        const float* x = inputs[0].data();
        const float* pg = g.data();
        float* d = gx.data;
        const bool acc = gx.accumulate;
        const auto gelu_backward = kernels::activation_loops().gelu_backward;
        parallel::parallel_for(g.size(), kGrainTanh, [&](std::size_t b, std::size_t e) {
            gelu_backward(x + b, pg + b, d + b, e - b, acc);
        });
    }
};

// The exact gelu and silu: plain loops with std::erf / std::exp (they are the opus-mt models' feed-forward, one
// element per hidden unit; the products around them cost d_model times more), split over threads. Each keeps
// its input and recomputes what the derivative needs.
//   gelu(z) = z Phi(z),        gelu'(z) = Phi(z) + z phi(z),            Phi(z) = 0.5 (1 + erf(z / sqrt 2)),
//                                                                       phi(z) = exp(-z^2 / 2) / sqrt(2 pi)
//   silu(z) = z s(z),          silu'(z) = s(z) (1 + z (1 - s(z))),      s(z) = 1 / (1 + exp(-z))
inline float normal_cdf(float z) { return 0.5f * (1.0f + std::erf(z * 0.70710678118654752f)); }
inline float normal_pdf(float z) { return 0.39894228040143268f * std::exp(-0.5f * z * z); }
inline float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

template <float (*Derivative)(float)>
struct PointwiseBackward : Node {
    const char* label;
    explicit PointwiseBackward(const char* l) : label(l) {}
    const char* name() const override { return label; }
    void backward(const Array& g) override {
        GradBuffer gx = grad_buffer(inputs[0]);
        if (!gx) return;
        const float* x = inputs[0].data();
        const float* pg = g.data();
        float* d = gx.data;
        const bool acc = gx.accumulate;
        parallel::parallel_for(g.size(), kGrainTanh, [&](std::size_t b, std::size_t e) {
            for (std::size_t i = b; i < e; ++i) {
                const float v = pg[i] * Derivative(x[i]);
                d[i] = acc ? d[i] + v : v;
            }
        });
    }
};

float gelu_erf_derivative(float z) { return normal_cdf(z) + z * normal_pdf(z); }
float silu_derivative(float z) {
    const float s = sigmoid(z);
    return s * (1.0f + z * (1.0f - s));
}

template <class F>
Tensor pointwise(const Tensor& x, F f) {
    Tensor out(Array::from_shape(x.array().shape()));
    const float* px = x.data();
    float* y = out.data();
    parallel::parallel_for(x.numel(), kGrainTanh, [&](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i) y[i] = f(px[i]);
    });
    return out;
}

}  // namespace

Tensor gelu_erf(const Tensor& x) {
    Tensor out = pointwise(x, [](float z) { return z * normal_cdf(z); });
    if (needs_grad({&x})) attach(out, std::make_shared<PointwiseBackward<gelu_erf_derivative>>("gelu_erf"), {&x});
    return out;
}

Tensor silu(const Tensor& x) {
    Tensor out = pointwise(x, [](float z) { return z * sigmoid(z); });
    if (needs_grad({&x})) attach(out, std::make_shared<PointwiseBackward<silu_derivative>>("silu"), {&x});
    return out;
}

Tensor relu(const Tensor& x) {
    Tensor out(Array::from_shape(x.array().shape()));
    const float* px = x.data();
    float* y = out.data();
    const auto relu_forward = kernels::pointwise_loops().relu_forward;
    parallel::parallel_for(x.numel(), kGrain, [&](std::size_t b, std::size_t e) { relu_forward(px + b, y + b, e - b); });
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
    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), on the kernel level's vector loops.
    const auto gelu_forward = kernels::activation_loops().gelu_forward;
    parallel::parallel_for(x.numel(), kGrainTanh, [&](std::size_t b, std::size_t e) { gelu_forward(px + b, y + b, e - b); });
    if (needs_grad({&x})) attach(out, std::make_shared<GeluBackward>(), {&x});
    return out;
}

}  // namespace ct
