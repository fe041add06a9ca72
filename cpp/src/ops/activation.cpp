#include "ctransformer/ops/activation.hpp"

#include <cmath>

#include "ctransformer/autograd.hpp"

namespace ct {

namespace {

// relu'(x) = 1 where the output is positive.
struct ReluBackward : Node {
    Tensor out;
    const char* name() const override { return "relu"; }
    void backward(const Array& g) override {
        if (Array* gx = grad_slot(inputs[0])) {
            const float* y = out.data();
            float* d = gx->data();
            for (std::size_t i = 0; i < g.size(); ++i) d[i] += y[i] > 0.0f ? g.data()[i] : 0.0f;
        }
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
        if (Array* gx = grad_slot(inputs[0])) {
            const float* x = inputs[0].data();
            float* d = gx->data();
            for (std::size_t i = 0; i < g.size(); ++i) {
                const float xi = x[i];
                const float t = std::tanh(kSqrt2OverPi * (xi + kGeluCoeff * xi * xi * xi));
                const float local = 0.5f * (1.0f + t) +
                                    0.5f * xi * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * xi * xi);
                d[i] += g.data()[i] * local;
            }
        }
    }
};

}  // namespace

Tensor relu(const Tensor& x) {
    Tensor out(Array::from_shape(x.shape()));
    const float* px = x.data();
    float* y = out.data();
    for (std::size_t i = 0; i < x.numel(); ++i) y[i] = px[i] > 0.0f ? px[i] : 0.0f;
    if (needs_grad({&x})) {
        auto node = std::make_shared<ReluBackward>();
        node->out = out.detach();
        attach(out, node, {&x});
    }
    return out;
}

Tensor gelu(const Tensor& x) {
    Tensor out(Array::from_shape(x.shape()));
    const float* px = x.data();
    float* y = out.data();
    for (std::size_t i = 0; i < x.numel(); ++i) {
        const float xi = px[i];
        y[i] = 0.5f * xi * (1.0f + std::tanh(kSqrt2OverPi * (xi + kGeluCoeff * xi * xi * xi)));
    }
    if (needs_grad({&x})) attach(out, std::make_shared<GeluBackward>(), {&x});
    return out;
}

}  // namespace ct
