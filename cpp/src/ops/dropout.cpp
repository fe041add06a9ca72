#include "ctransformer/ops/dropout.hpp"

#include <cmath>
#include <string>

#include "ctransformer/autograd.hpp"
#include "ctransformer/error.hpp"
#include "ctransformer/random.hpp"

namespace ct {

namespace {

// The kept elements' multiplier (0 or 1/(1-p)) is saved; the gradient is scaled by the same.
struct DropoutBackward : Node {
    Array multiplier;
    const char* name() const override { return "dropout"; }
    void backward(const Array& g) override {
        if (Array* gx = grad_slot(inputs[0])) {
            float* d = gx->data();
            for (std::size_t i = 0; i < g.size(); ++i) d[i] += g.data()[i] * multiplier.data()[i];
        }
    }
    void release_saved() override { multiplier = Array(); }
};

}  // namespace

Tensor dropout(const Tensor& x, float p, bool training) {
    if (!(p >= 0.0f && p <= 1.0f))
        throw ValueError("dropout: p must be a probability in [0, 1], got " + std::to_string(p));
    if (!training || p == 0.0f) return x;
    Array multiplier = Array::from_shape(x.shape());
    const float keep_scale = p == 1.0f ? 0.0f : 1.0f / (1.0f - p);
    Generator& gen = default_generator();
    for (std::size_t i = 0; i < multiplier.size(); ++i)
        multiplier.data()[i] = gen.uniform() < p ? 0.0f : keep_scale;
    Tensor out(Array::from_shape(x.shape()));
    for (std::size_t i = 0; i < x.numel(); ++i) out.data()[i] = x.data()[i] * multiplier.data()[i];
    if (needs_grad({&x})) {
        auto node = std::make_shared<DropoutBackward>();
        node->multiplier = std::move(multiplier);
        attach(out, node, {&x});
    }
    return out;
}

}  // namespace ct
