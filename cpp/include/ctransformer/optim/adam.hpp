// Adam and AdamW, the update of torch.optim.Adam / AdamW (single-tensor path, as torch runs on CPU):
//   step += 1
//   Adam:  g = g + weight_decay * p                  (L2 penalty added to the gradient)
//   AdamW: p = p * (1 - lr * weight_decay)           (decoupled weight decay)
//   m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
//   step_size = lr / (1 - beta1^step)                (bias corrections in double, as torch)
//   denom = sqrt(v) / sqrt(1 - beta2^step) + eps
//   p = p - step_size * m / denom
#pragma once
#include <utility>

#include "ctransformer/optim/optimizer.hpp"

namespace ct::optim {

struct AdamParamState {
    std::int64_t step = 0;  // 0: never updated (the moments are then empty)
    Array exp_avg;          // first moment m, the parameter's shape
    Array exp_avg_sq;       // second moment v
};

class Adam : public Optimizer {
public:
    // One group with these hyperparameters.
    explicit Adam(std::vector<Tensor> params, double lr = 1e-3, std::pair<double, double> betas = {0.9, 0.999},
                  double eps = 1e-8, double weight_decay = 0.0);
    // Several groups, each with its own hyperparameters; `defaults` (its params unused) is what
    // add_param_group callers fill missing hyperparameters from.
    explicit Adam(std::vector<ParamGroup> groups, ParamGroup defaults = ParamGroup{});

    void step() override;
    const char* name() const override { return decoupled_ ? "AdamW" : "Adam"; }
    bool decoupled_weight_decay() const { return decoupled_; }

    // The state of params[index] of param_groups()[group].
    const AdamParamState& state(std::size_t group, std::size_t index) const;
    // Replace it (a resume); the moments must have the parameter's shape unless step == 0.
    void set_state(std::size_t group, std::size_t index, AdamParamState state);

protected:
    Adam(std::vector<ParamGroup> groups, ParamGroup defaults, bool decoupled);
    void on_group_added(std::size_t group_index) override;

private:
    bool decoupled_ = false;
    std::vector<std::vector<AdamParamState>> state_;  // parallel to param_groups()
};

class AdamW : public Adam {
public:
    explicit AdamW(std::vector<Tensor> params, double lr = 1e-3, std::pair<double, double> betas = {0.9, 0.999},
                   double eps = 1e-8, double weight_decay = 1e-2);
    explicit AdamW(std::vector<ParamGroup> groups, ParamGroup defaults = default_hyperparameters());
    static ParamGroup default_hyperparameters();  // Adam's, with weight_decay 1e-2
};

}  // namespace ct::optim
