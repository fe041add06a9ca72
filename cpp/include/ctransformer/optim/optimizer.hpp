// Optimizer: parameter groups, each with its own hyperparameters, updated in place.
//
// A group's params are Tensor handles sharing storage with the model's parameters, so step()
// changes the model directly (as torch.optim does). Hyperparameters are doubles, like the Python
// floats torch keeps in its param_groups; the update casts them to float where torch does.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "ctransformer/runtime/tensor.hpp"

namespace ct::optim {

struct ParamGroup {
    std::vector<Tensor> params;
    double lr = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0.0;
    // Set by the first LR scheduler attached to the optimizer (torch's group["initial_lr"]);
    // later schedulers take it as their base lr.
    std::optional<double> initial_lr;
};

// Throws ct::ValueError naming `where` (e.g. "Adam: param_groups[1]") and the hyperparameter when
// lr < 0, eps < 0, weight_decay < 0, a beta outside [0, 1), or any of them is NaN.
void check_hyperparameters(const ParamGroup& group, const std::string& where);

class Optimizer {
public:
    virtual ~Optimizer() = default;
    Optimizer(const Optimizer&) = delete;
    Optimizer& operator=(const Optimizer&) = delete;

    // One update of every parameter that has a gradient; parameters without one are skipped.
    virtual void step() = 0;
    // set_to_none: the gradients become None (torch's default); otherwise they are zero-filled.
    void zero_grad(bool set_to_none = true);

    // Validates the group (non-empty, leaf tensors, not already optimized, hyperparameters).
    void add_param_group(ParamGroup group);
    std::vector<ParamGroup>& param_groups() { return groups_; }
    const std::vector<ParamGroup>& param_groups() const { return groups_; }
    std::size_t num_params() const;  // over all groups; state dicts index parameters in this order
    virtual const char* name() const = 0;
    // The hyperparameters a new group takes unless it sets its own (params is empty).
    const ParamGroup& defaults() const { return defaults_; }

protected:
    Optimizer() = default;
    // Called after a group was validated and appended (a subclass sizes its state here).
    virtual void on_group_added(std::size_t /*group_index*/) {}

    void set_defaults(ParamGroup defaults);

private:
    std::vector<ParamGroup> groups_;
    ParamGroup defaults_;
};

}  // namespace ct::optim
