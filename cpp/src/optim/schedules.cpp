#include "ctransformer/optim/schedules.hpp"

// The formulas must give the seeds' Python values to the last bit: no implicit fused multiply-add
// (with -march=native, min_lr + coeff * (lr - min_lr) would otherwise become one fma).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <algorithm>
#include <cmath>
#include <string>

#include "ctransformer/error.hpp"

namespace ct::optim {

namespace {

void check_noam(double model_size, double warmup, const char* fn) {
    if (!(model_size > 0.0))
        throw ValueError(std::string(fn) + ": model_size must be > 0, got " + std::to_string(model_size));
    if (!(warmup > 0.0))
        throw ValueError(std::string(fn) + ": warmup must be > 0 (it is raised to the power -1.5), got " +
                         std::to_string(warmup));
}

}  // namespace

double rate(std::int64_t step, double model_size, double factor, double warmup) {
    check_noam(model_size, warmup, "rate");
    if (step < 0) throw ValueError("rate: step must be >= 0, got " + std::to_string(step));
    if (step == 0) step = 1;
    const double s = double(step);
    // Same operations, in the same order, as the seed's Python, so the values are identical.
    return factor * (std::pow(model_size, -0.5) * std::min(std::pow(s, -0.5), s * std::pow(warmup, -1.5)));
}

NoamLambda::NoamLambda(double model_size_, double factor_, double warmup_)
    : model_size(model_size_), factor(factor_), warmup(warmup_) {
    check_noam(model_size, warmup, "NoamLambda");
}

double cosine_with_warmup(std::int64_t it, std::int64_t warmup_iters, std::int64_t lr_decay_iters,
                          double learning_rate, double min_lr) {
    if (it < 0) throw ValueError("cosine_with_warmup: it must be >= 0, got " + std::to_string(it));
    if (warmup_iters < 0)
        throw ValueError("cosine_with_warmup: warmup_iters must be >= 0, got " + std::to_string(warmup_iters));
    if (lr_decay_iters <= warmup_iters)
        throw ValueError("cosine_with_warmup: lr_decay_iters must be > warmup_iters, got lr_decay_iters=" +
                         std::to_string(lr_decay_iters) + " and warmup_iters=" + std::to_string(warmup_iters));
    // 1) linear warmup for warmup_iters steps
    if (it < warmup_iters) return learning_rate * double(it + 1) / double(warmup_iters + 1);
    // 2) past lr_decay_iters, the minimum
    if (it > lr_decay_iters) return min_lr;
    // 3) in between, cosine decay down to min_lr
    const double decay_ratio = double(it - warmup_iters) / double(lr_decay_iters - warmup_iters);
    const double coeff = 0.5 * (1.0 + std::cos(M_PI * decay_ratio));
    return min_lr + coeff * (learning_rate - min_lr);
}

}  // namespace ct::optim
