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

}  // namespace

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
