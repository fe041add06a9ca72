// Learning-rate schedulers with torch.optim.lr_scheduler's semantics:
// construction records each group's initial_lr (once per optimizer) as base_lrs and runs a first
// step, so the lr is already the value for epoch 0; step() advances last_epoch by one and writes
// the new lr into every group; get_last_lr() returns what was written.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "ctransformer/optim/optimizer.hpp"
#include "ctransformer/optim/schedules.hpp"

namespace ct::optim {

class LRScheduler {
public:
    virtual ~LRScheduler() = default;
    void step();
    const std::vector<double>& get_last_lr() const { return last_lr_; }
    const std::vector<double>& base_lrs() const { return base_lrs_; }
    std::int64_t last_epoch() const { return last_epoch_; }
    const std::shared_ptr<Optimizer>& optimizer() const { return optimizer_; }

    // What a resume needs (torch's state_dict minus the lambdas); loading leaves the
    // optimizer's lrs alone, as torch does (they come with the optimizer's own state).
    struct State {
        std::int64_t last_epoch = -1;
        std::int64_t step_count = 0;
        std::vector<double> base_lrs;
        std::vector<double> last_lr;
    };
    State state() const { return {last_epoch_, step_count_, base_lrs_, last_lr_}; }
    void load_state(const State& state);

protected:
    explicit LRScheduler(std::shared_ptr<Optimizer> optimizer, const char* name);
    // The lr of every group for last_epoch().
    virtual std::vector<double> get_lr() = 0;
    // Each subclass constructor ends with this (the first step cannot run in the base constructor).
    void initial_step();
    const char* name_;

private:
    std::shared_ptr<Optimizer> optimizer_;
    std::vector<double> base_lrs_;
    std::vector<double> last_lr_;
    std::int64_t last_epoch_ = -1;
    std::int64_t step_count_ = 0;
};

// lr = base_lr * lr_lambda(last_epoch), one lambda per group (or one for all).
class LambdaLR : public LRScheduler {
public:
    using Lambda = std::function<double(std::int64_t)>;
    LambdaLR(std::shared_ptr<Optimizer> optimizer, Lambda lr_lambda);
    LambdaLR(std::shared_ptr<Optimizer> optimizer, std::vector<Lambda> lr_lambdas);

protected:
    std::vector<double> get_lr() override;

private:
    std::vector<Lambda> lambdas_;
};

// Multiplies each group's current lr by gamma every step_size epochs (torch's chainable form).
class StepLR : public LRScheduler {
public:
    StepLR(std::shared_ptr<Optimizer> optimizer, std::int64_t step_size, double gamma = 0.1);
    std::int64_t step_size() const { return step_size_; }
    double gamma() const { return gamma_; }

protected:
    std::vector<double> get_lr() override;

private:
    std::int64_t step_size_;
    double gamma_;
};

// nanoGPT's schedule as a scheduler: lr = cosine_with_warmup(last_epoch, warmup_iters,
// lr_decay_iters, base_lr, min_lr) for each group (nanoGPT's learning_rate is the group's base lr).
class CosineWarmupLR : public LRScheduler {
public:
    CosineWarmupLR(std::shared_ptr<Optimizer> optimizer, std::int64_t warmup_iters, std::int64_t lr_decay_iters,
                   double min_lr);
    std::int64_t warmup_iters() const { return warmup_iters_; }
    std::int64_t lr_decay_iters() const { return lr_decay_iters_; }
    double min_lr() const { return min_lr_; }

protected:
    std::vector<double> get_lr() override;

private:
    std::int64_t warmup_iters_;
    std::int64_t lr_decay_iters_;
    double min_lr_;
};

}  // namespace ct::optim
