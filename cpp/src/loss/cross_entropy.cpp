#include "ctransformer/loss/cross_entropy.hpp"

#include <cmath>

#include "ctransformer/autograd.hpp"
#include "ctransformer/error.hpp"

namespace ct {

Reduction parse_reduction(const std::string& name, const char* fn, bool allow_batchmean) {
    if (name == "mean") return Reduction::Mean;
    if (name == "sum") return Reduction::Sum;
    if (name == "none") return Reduction::None;
    if (allow_batchmean && name == "batchmean") return Reduction::BatchMean;
    throw ValueError(std::string(fn) + ": reduction must be 'mean', 'sum'" + (allow_batchmean ? ", 'batchmean'" : "") +
                     " or 'none', got '" + name + "'");
}

namespace {

// With p = softmax(logits) and the smoothed target q = (1 - s) onehot(t) + s / C,
// d loss_i / d logits_i = p - q, times the reduction's weight for row i (0 for ignored rows).
struct CrossEntropyBackward : Node {
    Array log_probs;       // (N, C), saved from the forward pass
    IndexArray target;
    std::int64_t ignore_index;
    float smoothing, row_weight;  // row_weight: 1 for sum / none, 1 / valid rows for mean
    bool per_row;                 // reduction 'none': g has one entry per row
    const char* name() const override { return "cross_entropy"; }
    void backward(const Array& g) override {
        Array* gx = grad_slot(inputs[0]);
        if (!gx) return;
        const std::size_t N = log_probs.shape()[0], C = log_probs.shape()[1];
        for (std::size_t i = 0; i < N; ++i) {
            const std::int64_t t = target.data[i];
            if (t == ignore_index) continue;
            const float w = (per_row ? g.data()[i] : g.data()[0]) * row_weight;
            const float* lp = log_probs.data() + i * C;
            float* d = gx->data() + i * C;
            for (std::size_t c = 0; c < C; ++c) {
                const float q = smoothing / float(C) + (std::int64_t(c) == t ? 1.0f - smoothing : 0.0f);
                d[c] += w * (std::exp(lp[c]) - q);
            }
        }
    }
    void release_saved() override { log_probs = Array(); target = IndexArray(); }
};

}  // namespace

Tensor cross_entropy(const Tensor& logits, const IndexArray& target, std::int64_t ignore_index, Reduction reduction,
                     float label_smoothing) {
    if (logits.dim() != 2)
        throw ValueError("cross_entropy: input (logits) must have rank 2 (N, C), got shape " + shape_str(logits.shape()) +
                         "; flatten the leading dimensions first");
    const std::size_t N = logits.size(0), C = logits.size(1);
    if (target.shape.size() != 1 || target.shape[0] != N)
        throw ValueError("cross_entropy: target must have shape (" + std::to_string(N) +
                         ",) to match input (N, C), got " + shape_str(target.shape));
    if (reduction == Reduction::BatchMean) throw ValueError("cross_entropy: reduction 'batchmean' is for kl_div only");
    if (!(label_smoothing >= 0.0f && label_smoothing <= 1.0f))
        throw ValueError("cross_entropy: label_smoothing must be in [0, 1], got " + std::to_string(label_smoothing));
    for (std::size_t i = 0; i < N; ++i) {
        const std::int64_t t = target.data[i];
        if (t != ignore_index && (t < 0 || t >= std::int64_t(C)))
            throw IndexError("cross_entropy: target " + std::to_string(t) + " at position " + std::to_string(i) +
                             " is outside the classes [0, " + std::to_string(C) + ") and is not ignore_index " +
                             std::to_string(ignore_index));
    }
    // log p = x - max - log sum exp(x - max), row by row.
    Array log_probs = Array::from_shape({N, C});
    std::vector<float> per_row(N, 0.0f);
    std::size_t valid = 0;
    for (std::size_t i = 0; i < N; ++i) {
        const float* x = logits.data() + i * C;
        float* lp = log_probs.data() + i * C;
        float mx = -INFINITY;
        for (std::size_t c = 0; c < C; ++c) mx = std::max(mx, x[c]);
        double total = 0.0;
        for (std::size_t c = 0; c < C; ++c) total += std::exp(x[c] - mx);
        const float lse = float(std::log(total));
        double sum_lp = 0.0;
        for (std::size_t c = 0; c < C; ++c) {
            lp[c] = x[c] - mx - lse;
            sum_lp += lp[c];
        }
        const std::int64_t t = target.data[i];
        if (t == ignore_index) continue;
        ++valid;
        per_row[i] = (1.0f - label_smoothing) * -lp[t] + label_smoothing / float(C) * float(-sum_lp);
    }
    Tensor out;
    float row_weight = 1.0f;
    if (reduction == Reduction::None) {
        out = Tensor(Array::from_shape({N}));
        std::copy(per_row.begin(), per_row.end(), out.data());
    } else {
        double total = 0.0;
        for (float v : per_row) total += v;
        if (reduction == Reduction::Mean) {
            row_weight = 1.0f / float(valid);  // no valid row: NaN, as torch
            total /= double(valid);
        }
        out = Tensor(Array::from_shape({}));
        out.data()[0] = float(total);
    }
    if (needs_grad({&logits})) {
        auto node = std::make_shared<CrossEntropyBackward>();
        node->log_probs = std::move(log_probs);
        node->target = target;
        node->ignore_index = ignore_index;
        node->smoothing = label_smoothing;
        node->row_weight = row_weight;
        node->per_row = reduction == Reduction::None;
        attach(out, node, {&logits});
    }
    return out;
}

}  // namespace ct
