#include "ctransformer/loss/label_smoothing.hpp"

#include <cmath>
#include <string>

#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/error.hpp"

namespace ct {

namespace {

void check_config(std::size_t size, std::int64_t padding_idx, double smoothing, const char* fn) {
    if (size <= 2)
        throw ValueError(std::string(fn) + ": size must be > 2 (smoothing is spread over size - 2 classes), got " +
                         std::to_string(size));
    if (padding_idx < 0 || padding_idx >= std::int64_t(size))
        throw IndexError(std::string(fn) + ": padding_idx must be in [0, " + std::to_string(size - 1) + "], got " +
                         std::to_string(padding_idx));
    if (!(smoothing >= 0.0 && smoothing <= 1.0))
        throw ValueError(std::string(fn) + ": smoothing must be in [0, 1], got " + std::to_string(smoothing));
}

// loss = sum xlogy(td, td) - td * x: dloss/dx = -td (the distribution is a constant, as the
// seed's true_dist.clone().detach()).
struct LabelSmoothingBackward : Node {
    Tensor true_dist;
    const char* name() const override { return "label_smoothing"; }
    void backward(const Array& g) override {
        Array* gx = grad_slot(inputs[0]);
        if (!gx) return;
        const float go = g.data()[0];
        const float* td = true_dist.data();
        for (std::size_t i = 0; i < true_dist.numel(); ++i) gx->data()[i] -= go * td[i];
    }
    void release_saved() override { true_dist = Tensor(); }
};

}  // namespace

Tensor label_smoothing_distribution(const IndexArray& target, std::size_t size, std::int64_t padding_idx,
                                    double smoothing) {
    check_config(size, padding_idx, smoothing, "LabelSmoothing");
    if (target.shape.size() != 1)
        throw ValueError("LabelSmoothing: target must be a 1-d array of class ids (N,), got shape " +
                         shape_str(target.shape));
    const std::size_t n = target.numel();
    // The seed computes both in Python floats, then stores them in a float32 tensor.
    const float fill = float(smoothing / double(size - 2));
    const float confidence = float(1.0 - smoothing);
    Tensor td = Tensor::full({n, size}, fill);
    float* d = td.data();
    for (std::size_t i = 0; i < n; ++i) {
        const std::int64_t t = target.data[i];
        if (t < 0 || t >= std::int64_t(size))
            throw IndexError("LabelSmoothing: target[" + std::to_string(i) + "] = " + std::to_string(t) +
                             " is out of range for size " + std::to_string(size));
        float* row = d + i * size;
        row[t] = confidence;
        row[padding_idx] = 0.0f;
        if (t == padding_idx)
            for (std::size_t c = 0; c < size; ++c) row[c] = 0.0f;
    }
    return td;
}

LabelSmoothing::LabelSmoothing(std::size_t size, std::int64_t padding_idx, double smoothing)
    : size_(size), padding_idx_(padding_idx), smoothing_(smoothing) {
    check_config(size, padding_idx, smoothing, "LabelSmoothing");
}

Tensor LabelSmoothing::forward(const Tensor& x, const IndexArray& target) {
    if (x.dim() != 2 || x.size(1) != size_)
        throw ValueError("LabelSmoothing: x must be log-probabilities of shape (N, size=" + std::to_string(size_) +
                         "), got " + shape_str(x.shape()));
    if (target.shape.size() != 1 || target.numel() != x.size(0))
        throw ValueError("LabelSmoothing: target must have shape (" + std::to_string(x.size(0)) + ",) to match x, got " +
                         shape_str(target.shape));
    Tensor td = label_smoothing_distribution(target, size_, padding_idx_, smoothing_);
    const float* t = td.data();
    const float* xv = x.data();
    double total = 0.0;
    for (std::size_t i = 0; i < td.numel(); ++i) {
        // torch's kl_div: xlogy(t, t) - t * x (xlogy is 0 where t == 0)
        const float xlogy = t[i] == 0.0f ? 0.0f : t[i] * std::log(t[i]);
        total += double(xlogy - t[i] * xv[i]);
    }
    Tensor out(Array::from_shape({}));
    out.data()[0] = float(total);
    if (needs_grad({&x})) {
        auto node = std::make_shared<LabelSmoothingBackward>();
        node->true_dist = td;
        attach(out, node, {&x});
    }
    true_dist_ = td;
    return out;
}

}  // namespace ct
