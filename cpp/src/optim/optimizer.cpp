#include "ctransformer/optim/optimizer.hpp"

#include <cmath>
#include <cstdio>
#include <string>
#include <unordered_set>

#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/error.hpp"

namespace ct::optim {

namespace {

std::string num(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return buf;
}

}  // namespace

void check_hyperparameters(const ParamGroup& g, const std::string& where) {
    auto fail = [&](const char* what, double v, const char* expected) {
        throw ValueError(where + ": invalid " + what + " " + num(v) + ", expected " + expected);
    };
    if (!(g.lr >= 0.0)) fail("learning rate lr", g.lr, "lr >= 0");
    if (!(g.eps >= 0.0)) fail("eps", g.eps, "eps >= 0");
    if (!(g.beta1 >= 0.0 && g.beta1 < 1.0)) fail("beta parameter at index 0 (betas[0])", g.beta1, "0 <= betas[0] < 1");
    if (!(g.beta2 >= 0.0 && g.beta2 < 1.0)) fail("beta parameter at index 1 (betas[1])", g.beta2, "0 <= betas[1] < 1");
    if (!(g.weight_decay >= 0.0)) fail("weight_decay", g.weight_decay, "weight_decay >= 0");
}

void Optimizer::zero_grad(bool set_to_none) {
    for (auto& group : groups_)
        for (auto& p : group.params) {
            if (!p.has_grad()) continue;
            if (set_to_none) p.zero_grad();
            else p.grad().array().fill(0.0f);
        }
}

void Optimizer::set_defaults(ParamGroup defaults) {
    defaults.params.clear();
    defaults.initial_lr.reset();
    check_hyperparameters(defaults, std::string(name()));
    defaults_ = std::move(defaults);
}

std::size_t Optimizer::num_params() const {
    std::size_t n = 0;
    for (const auto& g : groups_) n += g.params.size();
    return n;
}

void Optimizer::add_param_group(ParamGroup group) {
    const std::string where = std::string(name()) + ": param_groups[" + std::to_string(groups_.size()) + "]";
    if (group.params.empty())
        throw ValueError(where + ": params is an empty list; an optimizer needs at least one parameter");
    std::unordered_set<const TensorImpl*> seen;
    for (const auto& g : groups_)
        for (const auto& p : g.params) seen.insert(p.impl().get());
    std::unordered_set<const TensorImpl*> mine;
    for (std::size_t i = 0; i < group.params.size(); ++i) {
        const Tensor& p = group.params[i];
        const std::string arg = where + ": params[" + std::to_string(i) + "]";
        if (!p.is_leaf())
            throw ValueError(arg + ": can't optimize a non-leaf Tensor (it was made by " +
                             std::string(p.grad_fn()->name()) + "); pass the parameter itself");
        if (seen.count(p.impl().get()))
            throw ValueError(arg + ": this tensor is already in another parameter group; "
                             "some parameters appear in more than one parameter group");
        if (!mine.insert(p.impl().get()).second)
            throw ValueError(arg + ": this tensor appears twice in the group (a tied weight must be listed once)");
    }
    check_hyperparameters(group, where);
    groups_.push_back(std::move(group));
    on_group_added(groups_.size() - 1);
}

}  // namespace ct::optim
