#include "ctransformer/loss/cross_entropy.hpp"

#include <cmath>

#include <algorithm>
#include <vector>

#include "../runtime/parallel.hpp"
#include "../kernels/simd/cross_entropy.hpp"
#include "ctransformer/runtime/autograd.hpp"
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

constexpr std::size_t kGrain = 8192;  // elements per thread (an exp each)

// With p = softmax(logits) and the smoothed target q = (1 - s) onehot(t) + s / C,
// d loss_i / d logits_i = p - q, times the reduction's weight for row i (0 for ignored rows).
// p is recomputed from the logits and the saved log-sum-exp of each row (an (N, C) array fewer),
// on the kernel level's row loop (kernels/simd/cross_entropy.cpp).
struct CrossEntropyBackward : Node {
    std::vector<float> lse;  // per row: max + log sum exp(x - max)
    IndexArray target;
    std::int64_t ignore_index;
    float smoothing, row_weight;  // row_weight: 1 for sum / none, 1 / valid rows for mean
    bool per_row;                 // reduction 'none': g has one entry per row
    const char* name() const override { return "cross_entropy"; }
    void backward(const Array& g) override {
        const GradBuffer gx = grad_buffer(inputs[0]);
        if (!gx) return;
        const std::size_t N = inputs[0].size(0), C = inputs[0].size(1);
        const float* logits = inputs[0].data();
        const auto backward_row = kernels::cross_entropy_loops().backward_row;
        parallel::parallel_for(N, std::max<std::size_t>(1, kGrain / std::max<std::size_t>(C, 1)),
                               [&](std::size_t r0, std::size_t r1) {
            for (std::size_t i = r0; i < r1; ++i) {
                const std::int64_t t = target.data[i];
                float* d = gx.data + i * C;
                if (t == ignore_index) {
                    if (!gx.accumulate) std::fill_n(d, C, 0.0f);
                    continue;
                }
                const float w = (per_row ? g.data()[i] : g.data()[0]) * row_weight;
                backward_row(logits + i * C, d, C, t, w, lse[i], smoothing, gx.accumulate);
            }
        });
    }
    void release_saved() override { lse = {}; target = IndexArray(); }
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
    // log p = x - max - log sum exp(x - max) = x - lse, row by row; the smoothing term needs
    // sum_c log p_c = sum_c x_c - C lse.
    std::vector<float> lse(N), per_row(N, 0.0f);
    const float* px = logits.data();
    const kernels::CrossEntropyLoops& loops = kernels::cross_entropy_loops();
    parallel::parallel_for(N, std::max<std::size_t>(1, kGrain / std::max<std::size_t>(C, 1)),
                           [&](std::size_t r0, std::size_t r1) {
        for (std::size_t i = r0; i < r1; ++i) {
            const float* x = px + i * C;
            lse[i] = loops.log_sum_exp(x, C);
            const std::int64_t t = target.data[i];
            if (t == ignore_index) continue;
            float loss = (1.0f - label_smoothing) * (lse[i] - x[t]);
            if (label_smoothing != 0.0f) loss += label_smoothing * (lse[i] - loops.sum(x, C) / float(C));
            per_row[i] = loss;
        }
    });
    std::size_t valid = 0;
    for (std::size_t i = 0; i < N; ++i) valid += target.data[i] != ignore_index;
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
        node->lse = std::move(lse);
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
