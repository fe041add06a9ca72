// ScheduledOptim of jadore801120's reference: before every step n_steps += 1 and
// every group's lr = lr_mul * d_model^-0.5 * min(n_steps^-0.5, n_steps * n_warmup_steps^-1.5).
#pragma once
#include <memory>

#include "ctransformer/optim/optimizer.hpp"

namespace ct::optim {

class ScheduledOptim {
public:
    ScheduledOptim(std::shared_ptr<Optimizer> optimizer, double lr_mul, double d_model, std::int64_t n_warmup_steps);
    void step_and_update_lr();  // update the lr, then step the inner optimizer
    void zero_grad(bool set_to_none = true) { optimizer_->zero_grad(set_to_none); }
    double lr_scale() const;    // d_model^-0.5 * min(...) for the current n_steps

    const std::shared_ptr<Optimizer>& optimizer() const { return optimizer_; }
    double lr_mul() const { return lr_mul_; }
    double d_model() const { return d_model_; }
    std::int64_t n_warmup_steps() const { return n_warmup_steps_; }
    std::int64_t n_steps() const { return n_steps_; }
    void set_n_steps(std::int64_t n);  // a resume

private:
    void update_learning_rate();
    std::shared_ptr<Optimizer> optimizer_;
    double lr_mul_;
    double d_model_;
    std::int64_t n_warmup_steps_;
    std::int64_t n_steps_ = 0;
};

}  // namespace ct::optim
