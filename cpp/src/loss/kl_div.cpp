#include "ctransformer/loss/kl_div.hpp"

#include <cmath>

#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/error.hpp"

namespace ct {

namespace {

// loss = sum w * t (log t - x): d/dx = -w t, d/dt = w (log t + 1 - x) (0 where t == 0).
struct KLDivBackward : Node {
    float weight;   // 1, 1/N or 1/numel
    bool per_elem;  // reduction 'none'
    const char* name() const override { return "kl_div"; }
    void backward(const Array& g) override {
        const Tensor& x = inputs[0];
        const Tensor& t = inputs[1];
        Array* gx = grad_slot(x);
        Array* gt = grad_slot(t);
        for (std::size_t i = 0; i < x.numel(); ++i) {
            const float w = (per_elem ? g.data()[i] : g.data()[0]) * weight;
            const float ti = t.data()[i];
            if (gx) gx->data()[i] -= w * ti;
            if (gt && ti > 0.0f) gt->data()[i] += w * (std::log(ti) + 1.0f - x.data()[i]);
        }
    }
};

}  // namespace

Tensor kl_div(const Tensor& log_probs, const Tensor& target, Reduction reduction) {
    if (log_probs.shape() != target.shape())
        throw ValueError("kl_div: target must have the input's shape " + shape_str(log_probs.shape()) + ", got " +
                         shape_str(target.shape()));
    const std::size_t n = log_probs.numel();
    Tensor out;
    float weight = 1.0f;
    if (reduction == Reduction::None) out = Tensor(Array::from_shape(log_probs.shape()));
    double total = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
        const float t = target.data()[i];
        const float v = t > 0.0f ? t * (std::log(t) - log_probs.data()[i]) : (t == 0.0f ? 0.0f : NAN);
        if (reduction == Reduction::None) out.data()[i] = v;
        total += v;
    }
    if (reduction != Reduction::None) {
        if (reduction == Reduction::Mean) weight = 1.0f / float(n);
        if (reduction == Reduction::BatchMean) {
            if (log_probs.dim() == 0) throw ValueError("kl_div: 'batchmean' needs an input with a batch dimension");
            weight = 1.0f / float(log_probs.size(0));
        }
        out = Tensor(Array::from_shape({}));
        out.data()[0] = float(total * weight);
    }
    if (needs_grad({&log_probs, &target})) {
        auto node = std::make_shared<KLDivBackward>();
        node->weight = weight;
        node->per_elem = reduction == Reduction::None;
        attach(out, node, {&log_probs, &target});
    }
    return out;
}

}  // namespace ct
