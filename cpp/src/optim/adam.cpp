#include "ctransformer/optim/adam.hpp"

// Rounding must follow torch's kernels op by op (see adam_coefficients; the update is
// kernels/simd/adam.cpp): no implicit fused multiply-add.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <cmath>

#include "../runtime/parallel.hpp"
#include "../kernels/simd/adam.hpp"
#include "../kernels/weight_cache.hpp"
#include "ctransformer/error.hpp"

namespace ct::optim {

namespace {

ParamGroup single_group(std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps,
                        double weight_decay) {
    ParamGroup g;
    g.params = std::move(params);
    g.lr = lr;
    g.beta1 = betas.first;
    g.beta2 = betas.second;
    g.eps = eps;
    g.weight_decay = weight_decay;
    return g;
}

// One parameter's step constants. The update itself (kernels/simd/adam.cpp, the kernel level's loop) is
// float32 arithmetic rounded as torch's CPU kernels round it: add with alpha, lerp and addcmul are fused
// multiply-adds there (Vectorized::fmadd), the rest is one rounding per op. Contraction is off for this file
// too, so the constants below are rounded as written.
kernels::AdamCoefficients adam_coefficients(const ParamGroup& g, std::int64_t step, bool decoupled) {
    const double bias_correction1 = 1.0 - std::pow(g.beta1, double(step));
    const double bias_correction2 = 1.0 - std::pow(g.beta2, double(step));
    const double step_size = g.lr / bias_correction1;
    const double bias_correction2_sqrt = std::pow(bias_correction2, 0.5);

    kernels::AdamCoefficients k;
    k.l2 = g.weight_decay != 0.0 && !decoupled;
    k.decay_p = g.weight_decay != 0.0 && decoupled;
    k.decay = float(1.0 - g.lr * g.weight_decay);  // AdamW: p.mul_(1 - lr * wd)
    k.wd = float(g.weight_decay);                  // Adam: grad.add(p, alpha=wd)
    k.w1 = float(1.0 - g.beta1);                   // m.lerp_(grad, 1 - beta1)
    k.b2 = float(g.beta2);                         // v.mul_(beta2).addcmul_(g, g, 1 - beta2)
    k.one_minus_b2 = float(1.0 - g.beta2);
    k.bc2s = float(bias_correction2_sqrt);
    k.eps = float(g.eps);
    k.neg_step_size = float(-step_size);           // p.addcdiv_(m, denom, value=-step_size)
    return k;
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps, double weight_decay)
    : Adam(std::vector<ParamGroup>{single_group(std::move(params), lr, betas, eps, weight_decay)},
           single_group({}, lr, betas, eps, weight_decay), false) {}

Adam::Adam(std::vector<ParamGroup> groups, ParamGroup defaults) : Adam(std::move(groups), std::move(defaults), false) {}

Adam::Adam(std::vector<ParamGroup> groups, ParamGroup defaults, bool decoupled) : decoupled_(decoupled) {
    set_defaults(std::move(defaults));
    if (groups.empty())
        throw ValueError(std::string(name()) + ": params is an empty list; an optimizer needs at least one parameter");
    for (auto& g : groups) add_param_group(std::move(g));
}

void Adam::on_group_added(std::size_t group_index) {
    state_.resize(group_index + 1);
    state_[group_index].resize(param_groups()[group_index].params.size());
}

void Adam::step() {
    auto& groups = param_groups();
    const auto update = kernels::adam_loops().update;
    for (std::size_t gi = 0; gi < groups.size(); ++gi) {
        const ParamGroup& g = groups[gi];
        for (std::size_t i = 0; i < g.params.size(); ++i) {
            const Tensor& p = g.params[i];
            if (!p.has_grad()) continue;
            const Tensor grad = p.grad();
            if (grad.shape() != p.shape())
                throw RuntimeError(std::string(name()) + ".step: param_groups[" + std::to_string(gi) + "].params[" +
                                   std::to_string(i) + "] has shape " + shape_str(p.shape()) +
                                   " but its gradient has shape " + shape_str(grad.shape()));
            AdamParamState& st = state_[gi][i];
            if (st.step == 0) {  // lazy initialisation, as torch
                st.exp_avg = Array::from_shape(p.shape());
                st.exp_avg.fill(0.0f);
                st.exp_avg_sq = Array::from_shape(p.shape());
                st.exp_avg_sq.fill(0.0f);
            }
            st.step += 1;
            float* pp = p.data();
            const float* pg = grad.data();
            float* pm = st.exp_avg.data();
            float* pv = st.exp_avg_sq.data();
            const kernels::AdamCoefficients k = adam_coefficients(g, st.step, decoupled_);
            // In an autocast region the parameter's bf16 copy is (re)written while the new values are hot.
            bf16_t* copy = weight_cache::bf16_to_write(p);
            parallel::parallel_for(p.numel(), 32768, [&](std::size_t b, std::size_t e) {
                update(pp + b, pg + b, pm + b, pv + b, e - b, k);
                if (copy)
                    for (std::size_t j = b; j < e; ++j) copy[j] = to_bf16(pp[j]);
            });
        }
    }
}

const AdamParamState& Adam::state(std::size_t group, std::size_t index) const {
    if (group >= state_.size() || index >= state_[group].size())
        throw IndexError(std::string(name()) + ".state: no parameter " + std::to_string(index) + " in group " +
                         std::to_string(group));
    return state_[group][index];
}

void Adam::set_state(std::size_t group, std::size_t index, AdamParamState s) {
    if (group >= state_.size() || index >= state_[group].size())
        throw IndexError(std::string(name()) + ".set_state: no parameter " + std::to_string(index) + " in group " +
                         std::to_string(group));
    const std::string where = std::string(name()) + ".set_state: param_groups[" + std::to_string(group) +
                              "].params[" + std::to_string(index) + "]";
    if (s.step < 0) throw ValueError(where + ": step must be >= 0, got " + std::to_string(s.step));
    if (s.step > 0) {
        const Shape shape = param_groups()[group].params[index].shape();
        const Shape m(s.exp_avg.shape().begin(), s.exp_avg.shape().end());
        const Shape v(s.exp_avg_sq.shape().begin(), s.exp_avg_sq.shape().end());
        if (m != shape)
            throw ValueError(where + ": exp_avg has shape " + shape_str(m) + ", the parameter " + shape_str(shape));
        if (v != shape)
            throw ValueError(where + ": exp_avg_sq has shape " + shape_str(v) + ", the parameter " + shape_str(shape));
    } else {
        s.exp_avg = Array();
        s.exp_avg_sq = Array();
    }
    state_[group][index] = std::move(s);
}

AdamW::AdamW(std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps, double weight_decay)
    : Adam(std::vector<ParamGroup>{single_group(std::move(params), lr, betas, eps, weight_decay)},
           single_group({}, lr, betas, eps, weight_decay), true) {}

AdamW::AdamW(std::vector<ParamGroup> groups, ParamGroup defaults) : Adam(std::move(groups), std::move(defaults), true) {}

ParamGroup AdamW::default_hyperparameters() {
    ParamGroup g;
    g.weight_decay = 1e-2;
    return g;
}

}  // namespace ct::optim
