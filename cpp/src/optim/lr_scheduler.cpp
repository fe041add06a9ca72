#include "ctransformer/optim/lr_scheduler.hpp"

#include <cmath>
#include <string>

#include "ctransformer/error.hpp"

namespace ct::optim {

LRScheduler::LRScheduler(std::shared_ptr<Optimizer> optimizer, const char* name)
    : name_(name), optimizer_(std::move(optimizer)) {
    if (!optimizer_) throw ValueError(std::string(name_) + ": optimizer is null");
    for (auto& g : optimizer_->param_groups()) {
        if (!g.initial_lr) g.initial_lr = g.lr;  // torch: group.setdefault("initial_lr", group["lr"])
        base_lrs_.push_back(*g.initial_lr);
    }
}

void LRScheduler::initial_step() {
    step_count_ = 0;
    step();
}

void LRScheduler::step() {
    ++step_count_;
    ++last_epoch_;
    std::vector<double> lrs;
    try {
        lrs = get_lr();
        auto& groups = optimizer_->param_groups();
        if (lrs.size() != groups.size())
            throw RuntimeError(std::string(name_) + ".step: the optimizer has " + std::to_string(groups.size()) +
                               " parameter groups, the scheduler was made for " + std::to_string(lrs.size()));
        // A NaN or negative lr would make the next optimizer step turn every parameter into NaN (or
        // climb the loss): refuse it here, where the schedule is named, and write nothing.
        for (std::size_t i = 0; i < lrs.size(); ++i)
            if (!std::isfinite(lrs[i]) || lrs[i] < 0.0)
                throw ValueError(std::string(name_) + ": the schedule gives lr = " + std::to_string(lrs[i]) +
                                 " for parameter group " + std::to_string(i) + " at epoch " +
                                 std::to_string(last_epoch_) + "; a learning rate must be finite and >= 0");
    } catch (...) {
        --step_count_;   // as if this step had not been asked for
        --last_epoch_;
        throw;
    }
    auto& groups = optimizer_->param_groups();
    for (std::size_t i = 0; i < groups.size(); ++i) groups[i].lr = lrs[i];
    last_lr_ = std::move(lrs);
}

void LRScheduler::load_state(const State& s) {
    const std::size_t n = optimizer_->param_groups().size();
    if (s.base_lrs.size() != n || s.last_lr.size() != n)
        throw ValueError(std::string(name_) + ".load_state_dict: state_dict has " + std::to_string(s.base_lrs.size()) +
                         " base_lrs and " + std::to_string(s.last_lr.size()) + " _last_lr entries, the optimizer " +
                         std::to_string(n) + " parameter groups");
    if (s.last_epoch < -1)
        throw ValueError(std::string(name_) + ".load_state_dict: last_epoch must be >= -1, got " +
                         std::to_string(s.last_epoch));
    last_epoch_ = s.last_epoch;
    step_count_ = s.step_count;
    base_lrs_ = s.base_lrs;
    last_lr_ = s.last_lr;
}

// --- LambdaLR ----------------------------------------------------------------------------------

LambdaLR::LambdaLR(std::shared_ptr<Optimizer> optimizer, Lambda lr_lambda) : LRScheduler(std::move(optimizer), "LambdaLR") {
    if (!lr_lambda) throw ValueError("LambdaLR: lr_lambda is empty");
    lambdas_.assign(this->optimizer()->param_groups().size(), lr_lambda);
    initial_step();
}

LambdaLR::LambdaLR(std::shared_ptr<Optimizer> optimizer, std::vector<Lambda> lr_lambdas)
    : LRScheduler(std::move(optimizer), "LambdaLR"), lambdas_(std::move(lr_lambdas)) {
    const std::size_t n = this->optimizer()->param_groups().size();
    if (lambdas_.size() != n)
        throw ValueError("LambdaLR: expected " + std::to_string(n) + " lr_lambdas (one per parameter group), got " +
                         std::to_string(lambdas_.size()));
    for (std::size_t i = 0; i < n; ++i)
        if (!lambdas_[i]) throw ValueError("LambdaLR: lr_lambda[" + std::to_string(i) + "] is empty");
    initial_step();
}

std::vector<double> LambdaLR::get_lr() {
    std::vector<double> out;
    for (std::size_t i = 0; i < lambdas_.size(); ++i) out.push_back(base_lrs()[i] * lambdas_[i](last_epoch()));
    return out;
}

// --- StepLR ------------------------------------------------------------------------------------

StepLR::StepLR(std::shared_ptr<Optimizer> optimizer, std::int64_t step_size, double gamma)
    : LRScheduler(std::move(optimizer), "StepLR"), step_size_(step_size), gamma_(gamma) {
    if (step_size <= 0) throw ValueError("StepLR: step_size must be a positive integer, got " + std::to_string(step_size));
    if (!std::isfinite(gamma) || gamma < 0.0)
        throw ValueError("StepLR: gamma must be a finite number >= 0, got " + std::to_string(gamma));
    initial_step();
}

std::vector<double> StepLR::get_lr() {
    std::vector<double> out;
    const bool decay = last_epoch() != 0 && last_epoch() % step_size_ == 0;
    for (const auto& g : optimizer()->param_groups()) out.push_back(decay ? g.lr * gamma_ : g.lr);
    return out;
}

// --- CosineWarmupLR ----------------------------------------------------------------------------

CosineWarmupLR::CosineWarmupLR(std::shared_ptr<Optimizer> optimizer, std::int64_t warmup_iters,
                               std::int64_t lr_decay_iters, double min_lr)
    : LRScheduler(std::move(optimizer), "CosineWarmupLR"),
      warmup_iters_(warmup_iters),
      lr_decay_iters_(lr_decay_iters),
      min_lr_(min_lr) {
    if (warmup_iters < 0)
        throw ValueError("CosineWarmupLR: warmup_iters must be >= 0, got " + std::to_string(warmup_iters));
    if (lr_decay_iters <= warmup_iters)
        throw ValueError("CosineWarmupLR: lr_decay_iters must be > warmup_iters, got lr_decay_iters=" +
                         std::to_string(lr_decay_iters) + " and warmup_iters=" + std::to_string(warmup_iters));
    if (!(min_lr >= 0.0) || !std::isfinite(min_lr))
        throw ValueError("CosineWarmupLR: min_lr must be a finite number >= 0, got " + std::to_string(min_lr));
    initial_step();
}

std::vector<double> CosineWarmupLR::get_lr() {
    std::vector<double> out;
    for (double base : base_lrs())
        out.push_back(cosine_with_warmup(last_epoch(), warmup_iters_, lr_decay_iters_, base, min_lr_));
    return out;
}

}  // namespace ct::optim
