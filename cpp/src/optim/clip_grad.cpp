#include "ctransformer/optim/clip_grad.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "ctransformer/error.hpp"

namespace ct::optim {

namespace {

// ||x||_p of one gradient, accumulated in double and rounded to float as torch's float32 result.
float vector_norm(const float* x, std::size_t n, double p) {
    if (std::isinf(p)) {
        float m = 0.0f;
        for (std::size_t i = 0; i < n; ++i) {
            if (std::isnan(x[i])) return NAN;
            m = std::max(m, std::abs(x[i]));
        }
        return m;
    }
    double s = 0.0;
    if (p == 2.0) {
        for (std::size_t i = 0; i < n; ++i) s += double(x[i]) * double(x[i]);
        return float(std::sqrt(s));
    }
    if (p == 1.0) {
        for (std::size_t i = 0; i < n; ++i) s += std::abs(double(x[i]));
        return float(s);
    }
    for (std::size_t i = 0; i < n; ++i) s += std::pow(std::abs(double(x[i])), p);
    return float(std::pow(s, 1.0 / p));
}

}  // namespace

float clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
    if (!(norm_type > 0.0))
        throw ValueError("clip_grad_norm_: norm_type must be > 0 or inf, got " + std::to_string(norm_type));
    if (std::isnan(max_norm)) throw ValueError("clip_grad_norm_: max_norm is NaN");
    std::vector<Tensor> grads;
    for (const auto& p : params)
        if (p.has_grad()) grads.push_back(p.grad());
    if (grads.empty()) return 0.0f;
    // The norm of the per-tensor norms, as torch stacks them.
    std::vector<float> norms;
    for (const auto& g : grads) norms.push_back(vector_norm(g.data(), g.numel(), norm_type));
    const float total = vector_norm(norms.data(), norms.size(), norm_type);
    if (error_if_nonfinite && !std::isfinite(total))
        throw RuntimeError("clip_grad_norm_: the total norm of order " + std::to_string(norm_type) +
                           " of the gradients is non-finite, so it cannot be clipped; pass "
                           "error_if_nonfinite=False to scale the gradients by it anyway");
    // float32 arithmetic as torch: clip_coef = max_norm / (total + 1e-6), clamped to 1.
    const float coef = std::min(float(max_norm) / (total + 1e-6f), 1.0f);
    for (auto& g : grads) {
        float* d = g.data();
        for (std::size_t i = 0; i < g.numel(); ++i) d[i] *= coef;
    }
    return total;
}

}  // namespace ct::optim
