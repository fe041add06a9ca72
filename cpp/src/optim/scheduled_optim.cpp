#include "ctransformer/optim/scheduled_optim.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "ctransformer/error.hpp"

namespace ct::optim {

ScheduledOptim::ScheduledOptim(std::shared_ptr<Optimizer> optimizer, double lr_mul, double d_model,
                               std::int64_t n_warmup_steps)
    : optimizer_(std::move(optimizer)), lr_mul_(lr_mul), d_model_(d_model), n_warmup_steps_(n_warmup_steps) {
    if (!optimizer_) throw ValueError("ScheduledOptim: optimizer is null");
    if (!(lr_mul >= 0.0) || !std::isfinite(lr_mul))
        throw ValueError("ScheduledOptim: lr_mul must be a finite number >= 0, got " + std::to_string(lr_mul));
    if (!(d_model > 0.0) || !std::isfinite(d_model))
        throw ValueError("ScheduledOptim: d_model must be a finite number > 0, got " + std::to_string(d_model));
    if (n_warmup_steps <= 0)
        throw ValueError("ScheduledOptim: n_warmup_steps must be > 0, got " + std::to_string(n_warmup_steps));
}

double ScheduledOptim::lr_scale() const {
    const double n = double(n_steps_);
    return std::pow(d_model_, -0.5) * std::min(std::pow(n, -0.5), n * std::pow(double(n_warmup_steps_), -1.5));
}

void ScheduledOptim::update_learning_rate() {
    n_steps_ += 1;
    const double lr = lr_mul_ * lr_scale();
    for (auto& g : optimizer_->param_groups()) g.lr = lr;
}

void ScheduledOptim::step_and_update_lr() {
    update_learning_rate();
    optimizer_->step();
}

void ScheduledOptim::set_n_steps(std::int64_t n) {
    if (n < 0) throw ValueError("ScheduledOptim: n_steps must be >= 0, got " + std::to_string(n));
    n_steps_ = n;
}

}  // namespace ct::optim
