// ctransformer._core.optim: optimizers, learning-rate schedulers, gradient clipping.
// Python-facing parsing (torch-style param lists and group dicts, state dicts of NumPy arrays)
// lives here; the updates run in C++ with the GIL released.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <cmath>
#include <tuple>
#include <string>

#include "bindings.hpp"
#include "convert.hpp"
#include "ctransformer/error.hpp"
#include "ctransformer/optim.hpp"

namespace ctpy {

using ct::Tensor;
using namespace ct::optim;

namespace {

std::pair<double, double> to_betas(const py::handle& obj, const std::string& what) {
    if (!py::isinstance<py::sequence>(obj) || py::isinstance<py::str>(obj))
        throw ct::TypeError(what + ": expected a pair (beta1, beta2), got " + type_name(obj));
    auto seq = py::reinterpret_borrow<py::sequence>(obj);
    if (seq.size() != 2)
        throw ct::ValueError(what + ": expected a pair (beta1, beta2), got " + std::to_string(seq.size()) + " values");
    return {to_double(seq[0], what + "[0]"), to_double(seq[1], what + "[1]")};
}

const char* const kGroupKeys[] = {"params", "lr", "betas", "eps", "weight_decay", "initial_lr"};

// Set one hyperparameter of `g` from Python; returns false for an unknown key.
bool set_hyper(ParamGroup& g, const std::string& key, const py::handle& value, const std::string& what) {
    if (key == "lr") g.lr = to_double(value, what);
    else if (key == "betas") std::tie(g.beta1, g.beta2) = to_betas(value, what);
    else if (key == "eps") g.eps = to_double(value, what);
    else if (key == "weight_decay") g.weight_decay = to_double(value, what);
    else if (key == "initial_lr") g.initial_lr = to_double(value, what);
    else return false;
    return true;
}

ParamGroup group_from_dict(const py::dict& d, const ParamGroup& defaults, const std::string& what) {
    if (!d.contains("params")) throw ct::ValueError(what + ": a parameter group dict needs a 'params' entry");
    ParamGroup g = defaults;
    g.params = to_tensor_list(d["params"], what + "['params']", true);
    for (auto item : d) {
        const std::string key = py::str(item.first).cast<std::string>();
        if (key == "params") continue;
        if (!set_hyper(g, key, item.second, what + "['" + key + "']"))
            throw ct::ValueError(what + ": unknown key '" + key +
                                 "'; a group may set params, lr, betas, eps, weight_decay, initial_lr");
    }
    return g;
}

// torch-style `params`: an iterable of tensors (one group) or of dicts (a group each).
std::vector<ParamGroup> parse_params(const py::handle& params, const ParamGroup& defaults, const char* fn) {
    const std::string what = std::string(fn) + ": params";
    if (py::isinstance<py::dict>(params))
        throw ct::TypeError(what + ": expected an iterable of ctransformer.Tensor or a list of group dicts, got a "
                                   "single dict; wrap it in a list");
    py::list items;
    if (py::isinstance<Tensor>(params) || py::isinstance<py::set>(params) || !py::hasattr(params, "__iter__") ||
        py::isinstance<py::str>(params))
        to_tensor_list(params, what, false);  // throws the right message
    for (py::handle item : params) items.append(item);
    if (items.empty()) throw ct::ValueError(what + ": got an empty parameter list; an optimizer needs at least one parameter");
    std::vector<ParamGroup> groups;
    if (py::isinstance<py::dict>(items[0])) {
        for (std::size_t i = 0; i < items.size(); ++i) {
            const std::string w = what + "[" + std::to_string(i) + "]";
            if (!py::isinstance<py::dict>(items[i]))
                throw ct::TypeError(w + ": expected a dict like the other groups, got " + type_name(items[i]));
            groups.push_back(group_from_dict(items[i].cast<py::dict>(), defaults, w));
        }
    } else {
        ParamGroup g = defaults;
        g.params = to_tensor_list(items, what, false);
        groups.push_back(std::move(g));
    }
    return groups;
}

ParamGroup defaults_from(const Real& lr, const py::handle& betas, const Real& eps, const Real& weight_decay,
                         const char* fn) {
    ParamGroup d;
    d.lr = to_double(lr, std::string(fn) + ": lr");
    std::tie(d.beta1, d.beta2) = to_betas(betas, std::string(fn) + ": betas");
    d.eps = to_double(eps, std::string(fn) + ": eps");
    d.weight_decay = to_double(weight_decay, std::string(fn) + ": weight_decay");
    check_hyperparameters(d, fn);
    return d;
}

// A live view of optimizer.param_groups[index]: g["lr"] = x changes the optimizer.
struct GroupRef {
    std::shared_ptr<Optimizer> opt;
    std::size_t index;
    ParamGroup& get() const {
        if (index >= opt->param_groups().size()) throw ct::IndexError("param_groups: the group no longer exists");
        return opt->param_groups()[index];
    }
    std::string where() const { return std::string(opt->name()) + ".param_groups[" + std::to_string(index) + "]"; }
};

py::object group_get(const ParamGroup& g, const std::string& key, const std::string& where) {
    if (key == "params") return py::cast(g.params);
    if (key == "lr") return py::float_(g.lr);
    if (key == "betas") return py::make_tuple(g.beta1, g.beta2);
    if (key == "eps") return py::float_(g.eps);
    if (key == "weight_decay") return py::float_(g.weight_decay);
    if (key == "initial_lr" && g.initial_lr) return py::float_(*g.initial_lr);
    throw py::key_error(where + ": no key '" + key + "'");
}

py::list group_keys(const ParamGroup& g) {
    py::list keys;
    for (const char* k : kGroupKeys)
        if (std::string(k) != "initial_lr" || g.initial_lr) keys.append(k);
    return keys;
}

py::dict group_dict(const ParamGroup& g, const std::string& where) {
    py::dict d;
    for (auto k : group_keys(g)) d[k] = group_get(g, k.cast<std::string>(), where);
    return d;
}

py::object dict_item(const py::handle& d, const char* key, const std::string& what) {
    if (!py::isinstance<py::dict>(d)) throw ct::TypeError(what + ": expected a dict, got " + type_name(d));
    auto dict = py::reinterpret_borrow<py::dict>(d);
    if (!dict.contains(key)) throw ct::ValueError(what + ": missing key '" + std::string(key) + "'");
    return dict[key];
}

// The torch state-dict format itself (its layout, ids and checks) is Python's: ctransformer/optim_state.py.
// Here: one parameter's state out, and a whole checked state in, converted before anything changes.
py::object adam_param_state(const Adam& opt, std::size_t group, std::size_t index) {
    if (group >= opt.param_groups().size() || index >= opt.param_groups()[group].params.size())
        throw ct::IndexError(std::string(opt.name()) + "._param_state: no parameter (" + std::to_string(group) + ", " +
                             std::to_string(index) + ")");
    const AdamParamState& s = opt.state(group, index);
    if (s.step == 0) return py::none();
    return py::make_tuple(s.step, copy_to_numpy(s.exp_avg), copy_to_numpy(s.exp_avg_sq));
}

// hypers: one {key: value} dict per group (lr, betas, eps, weight_decay, initial_lr), named `where`[g];
// states: (group, index, step, exp_avg, exp_avg_sq, where) for the parameters that have one. Every value is
// converted and every group checked before the optimizer changes, so a bad state dict leaves it as it was.
void adam_load(Adam& opt, const std::string& where, const py::list& hypers, const py::list& states) {
    auto& pg = opt.param_groups();
    if (hypers.size() != pg.size()) throw ct::ValueError(where + ": expected one hyperparameter dict per group");
    std::vector<ParamGroup> new_groups = pg;
    for (std::size_t g = 0; g < pg.size(); ++g) {
        const std::string w = where + "['param_groups'][" + std::to_string(g) + "]";
        for (auto item : hypers[g].cast<py::dict>()) {
            const std::string key = py::str(item.first).cast<std::string>();
            set_hyper(new_groups[g], key, item.second, w + "['" + key + "']");
        }
        check_hyperparameters(new_groups[g], w);
    }
    std::vector<std::vector<AdamParamState>> new_state(pg.size());
    for (std::size_t g = 0; g < pg.size(); ++g) new_state[g].resize(pg[g].params.size());
    for (auto entry : states) {
        auto t = entry.cast<py::tuple>();
        const auto g = t[0].cast<std::size_t>(), i = t[1].cast<std::size_t>();
        const std::string w = t[5].cast<std::string>();
        AdamParamState& s = new_state.at(g).at(i);
        s.step = t[2].cast<std::int64_t>();
        s.exp_avg = to_array(t[3], (w + "['exp_avg']").c_str());
        s.exp_avg_sq = to_array(t[4], (w + "['exp_avg_sq']").c_str());
    }
    for (std::size_t g = 0; g < pg.size(); ++g) {
        new_groups[g].params = pg[g].params;
        pg[g] = std::move(new_groups[g]);
        for (std::size_t i = 0; i < pg[g].params.size(); ++i) opt.set_state(g, i, std::move(new_state[g][i]));
    }
}

std::shared_ptr<Optimizer> as_optimizer(const py::handle& obj, const char* fn) {
    if (!py::isinstance<Optimizer>(obj))
        throw ct::TypeError(std::string(fn) + ": optimizer must be a ctransformer.optim optimizer (Adam, AdamW), got " +
                            py::str(py::type::of(obj)).cast<std::string>());
    return obj.cast<std::shared_ptr<Optimizer>>();
}

// A Python lr_lambda, called with the GIL held and released with it (whatever thread drops it).
LambdaLR::Lambda python_lambda(const py::handle& fn, const std::string& what) {
    if (py::isinstance<NoamLambda>(fn)) return fn.cast<NoamLambda>();  // pure C++, no Python per step
    if (!PyCallable_Check(fn.ptr()))
        throw ct::TypeError(what + ": expected a callable (step -> factor) or a NoamLambda, got " + type_name(fn));
    std::shared_ptr<py::object> held(new py::object(py::reinterpret_borrow<py::object>(fn)), [](py::object* p) {
        py::gil_scoped_acquire gil;
        delete p;
    });
    return [held, what](std::int64_t step) {
        py::gil_scoped_acquire gil;
        py::object r = (*held)(step);
        if (py::isinstance<py::str>(r) || r.is_none() || !PyNumber_Check(r.ptr()))
            throw ct::TypeError(what + " must return a number (the lr factor), it returned " + type_name(r));
        return py::float_(r).cast<double>();
    };
}

py::dict scheduler_state_dict(const LRScheduler& s) {
    const LRScheduler::State st = s.state();
    py::dict d;
    d["last_epoch"] = st.last_epoch;
    d["_step_count"] = st.step_count;
    d["base_lrs"] = st.base_lrs;
    d["_last_lr"] = st.last_lr;
    return d;
}

void scheduler_load_state_dict(LRScheduler& s, const py::handle& d, const char* fn) {
    const std::string w = std::string(fn) + ".load_state_dict: state_dict";
    LRScheduler::State st;
    st.last_epoch = to_whole(dict_item(d, "last_epoch", w), w + "['last_epoch']");
    st.step_count = to_whole(dict_item(d, "_step_count", w), w + "['_step_count']");
    for (auto v : dict_item(d, "base_lrs", w)) st.base_lrs.push_back(to_double(v, w + "['base_lrs']"));
    for (auto v : dict_item(d, "_last_lr", w)) st.last_lr.push_back(to_double(v, w + "['_last_lr']"));
    s.load_state(st);
}

}  // namespace

void bind_optim(py::module_& m) {
    // --- optimizers ----------------------------------------------------------------------------
    py::class_<GroupRef>(m, "ParamGroup", R"doc(A live view of one of an optimizer's parameter groups.

Reads and writes like torch's group dict: ``g["lr"] = 0.1`` changes the optimizer.
Keys: params (read-only), lr, betas, eps, weight_decay, and initial_lr once a scheduler set it.)doc")
        .def("__getitem__", [](const GroupRef& r, const std::string& key) { return group_get(r.get(), key, r.where()); })
        .def("__setitem__", [](const GroupRef& r, const std::string& key, py::object value) {
            ParamGroup& g = r.get();
            if (key == "params")
                throw ct::ValueError(r.where() + "['params'] cannot be replaced; use add_param_group for new parameters");
            ParamGroup updated = g;
            if (!set_hyper(updated, key, value, r.where() + "['" + key + "']"))
                throw py::key_error(r.where() + ": unknown key '" + key + "'; settable: lr, betas, eps, weight_decay, initial_lr");
            check_hyperparameters(updated, r.where());
            g = std::move(updated);
        })
        .def("__contains__", [](const GroupRef& r, const std::string& key) {
            for (auto k : group_keys(r.get()))
                if (k.cast<std::string>() == key) return true;
            return false;
        })
        .def("__len__", [](const GroupRef& r) { return group_keys(r.get()).size(); })
        .def("__iter__", [](const GroupRef& r) { return py::iter(group_keys(r.get())); })
        .def("keys", [](const GroupRef& r) { return group_keys(r.get()); })
        .def("items", [](const GroupRef& r) { return group_dict(r.get(), r.where()).attr("items")(); })
        .def("get", [](const GroupRef& r, const std::string& key, py::object dflt) {
            const py::dict d = group_dict(r.get(), r.where());
            return d.contains(key) ? py::object(d[py::str(key)]) : dflt;
        }, py::arg("key"), py::arg("default") = py::none())
        .def("to_dict", [](const GroupRef& r) { return group_dict(r.get(), r.where()); }, "A plain dict copy.")
        .def("__repr__", [](const GroupRef& r) { return py::repr(group_dict(r.get(), r.where())); });

    py::class_<Optimizer, std::shared_ptr<Optimizer>>(m, "Optimizer", "Base of the optimizers: parameter groups updated in place.")
        .def("step", &Optimizer::step, py::call_guard<py::gil_scoped_release>(),
             "One update of every parameter that has a gradient (parameters whose grad is None are skipped).")
        .def("zero_grad", &Optimizer::zero_grad, py::arg("set_to_none") = true,
             "Drop every parameter's gradient (None), or zero-fill it with set_to_none=False.")
        .def_property_readonly("param_groups", [](std::shared_ptr<Optimizer> self) {
            py::list out;
            for (std::size_t i = 0; i < self->param_groups().size(); ++i) out.append(GroupRef{self, i});
            return out;
        }, "Live views of the groups: ``opt.param_groups[0]['lr'] = x`` takes effect.")
        .def_property_readonly("defaults", [](const Optimizer& self) {
            py::dict d = group_dict(self.defaults(), "");
            d.attr("pop")("params");
            return d;
        }, "The hyperparameters a group added without its own take.")
        .def("add_param_group", [](Optimizer& self, py::object group) {
            const std::string w = std::string(self.name()) + ".add_param_group: param_group";
            if (!py::isinstance<py::dict>(group))
                throw ct::TypeError(w + ": expected a dict with 'params', got " + type_name(group));
            self.add_param_group(group_from_dict(group.cast<py::dict>(), self.defaults(), w));
        }, py::arg("param_group"), "Add a group dict {'params': [...], 'lr': ..., ...}; unset hyperparameters take the defaults.");

    auto adam_doc = R"doc(Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0)

torch.optim.Adam's update; weight_decay is an L2 term added to the gradient. ``params`` is a list
of Tensors or a list of group dicts ``{"params": [...], "lr": ..., "weight_decay": ...}``.)doc";
    py::class_<Adam, Optimizer, std::shared_ptr<Adam>>(m, "Adam", adam_doc)
        .def(py::init([](py::object params, Real lr, py::object betas, Real eps, Real weight_decay) {
            ParamGroup d = defaults_from(lr, betas, eps, weight_decay, "Adam");
            return std::make_shared<Adam>(parse_params(params, d, "Adam"), d);
        }), py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = py::make_tuple(0.9, 0.999),
            py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0)
        .def_property_readonly("decoupled_weight_decay", &Adam::decoupled_weight_decay,
                               "True for AdamW (p *= 1 - lr * weight_decay), False for Adam's L2 term.")
        .def("_param_state", &adam_param_state, py::arg("group"), py::arg("index"),
             "None, or (step, exp_avg, exp_avg_sq) as NumPy copies (for ctransformer.optim_state).")
        .def("_load", &adam_load, py::arg("where"), py::arg("hypers"), py::arg("states"),
             "Commit a checked state (ctransformer.optim_state.load_state_dict); nothing changes if a value fails.")
        .def("__repr__", [](const Adam& a) {
            std::string s = std::string(a.name()) + "(";
            for (std::size_t i = 0; i < a.param_groups().size(); ++i)
                s += std::string(i ? ", " : "") + py::repr(group_dict(a.param_groups()[i], "")).cast<std::string>();
            return s + ")";
        });

    py::class_<AdamW, Adam, std::shared_ptr<AdamW>>(m, "AdamW", R"doc(AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)

torch.optim.AdamW's update: decoupled weight decay, p *= 1 - lr * weight_decay, before the Adam step.)doc")
        .def(py::init([](py::object params, Real lr, py::object betas, Real eps, Real weight_decay) {
            ParamGroup d = defaults_from(lr, betas, eps, weight_decay, "AdamW");
            return std::make_shared<AdamW>(parse_params(params, d, "AdamW"), d);
        }), py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = py::make_tuple(0.9, 0.999),
            py::arg("eps") = 1e-8, py::arg("weight_decay") = 1e-2);

    // --- schedules -----------------------------------------------------------------------------
    m.def("rate", [](py::object step, double model_size, double factor, double warmup) {
        return rate(to_whole(step, "rate: step"), model_size, factor, warmup);
    }, py::arg("step"), py::arg("model_size"), py::arg("factor"), py::arg("warmup"),
       "The Annotated Transformer's Noam rate: factor * model_size^-0.5 * min(step^-0.5, step * warmup^-1.5), step 0 counted as 1.");
    m.def("cosine_with_warmup", [](py::object it, std::int64_t warmup_iters, std::int64_t lr_decay_iters,
                                   double learning_rate, double min_lr) {
        return cosine_with_warmup(to_whole(it, "cosine_with_warmup: it"), warmup_iters, lr_decay_iters, learning_rate, min_lr);
    }, py::arg("it"), py::arg("warmup_iters"), py::arg("lr_decay_iters"), py::arg("learning_rate"), py::arg("min_lr"),
       "nanoGPT's get_lr: learning_rate * (it + 1) / (warmup_iters + 1) during warmup, then cosine down to min_lr "
       "at lr_decay_iters, min_lr after.");

    py::class_<NoamLambda>(m, "NoamLambda", R"doc(NoamLambda(model_size, factor, warmup)

``rate(step, model_size, factor, warmup)`` as an lr_lambda for LambdaLR, evaluated in C++.)doc")
        .def(py::init<double, double, double>(), py::arg("model_size"), py::arg("factor"), py::arg("warmup"))
        .def("__call__", [](const NoamLambda& f, py::object step) { return f(to_whole(step, "NoamLambda: step")); }, py::arg("step"))
        .def_readonly("model_size", &NoamLambda::model_size)
        .def_readonly("factor", &NoamLambda::factor)
        .def_readonly("warmup", &NoamLambda::warmup)
        .def("__repr__", [](const NoamLambda& f) {
            return "NoamLambda(model_size=" + py::repr(py::float_(f.model_size)).cast<std::string>() +
                   ", factor=" + py::repr(py::float_(f.factor)).cast<std::string>() +
                   ", warmup=" + py::repr(py::float_(f.warmup)).cast<std::string>() + ")";
        });

    py::class_<LRScheduler, std::shared_ptr<LRScheduler>>(m, "LRScheduler",
                                                          "Base of the schedulers (torch.optim.lr_scheduler semantics).")
        .def("step", &LRScheduler::step, "Advance last_epoch by one and write the new lr into every group.")
        .def("get_last_lr", &LRScheduler::get_last_lr, "The lrs the last step wrote, one per group.")
        .def_property_readonly("last_epoch", &LRScheduler::last_epoch)
        .def_property_readonly("base_lrs", &LRScheduler::base_lrs)
        .def_property_readonly("optimizer", &LRScheduler::optimizer)
        .def("state_dict", &scheduler_state_dict, "{'last_epoch', '_step_count', 'base_lrs', '_last_lr'} (torch's keys).")
        .def("load_state_dict", [](LRScheduler& s, py::object d) { scheduler_load_state_dict(s, d, "LRScheduler"); },
             py::arg("state_dict"));

    py::class_<LambdaLR, LRScheduler, std::shared_ptr<LambdaLR>>(m, "LambdaLR", R"doc(LambdaLR(optimizer, lr_lambda)

lr = base_lr * lr_lambda(last_epoch) per group. lr_lambda is a Python callable, a NoamLambda (no
Python call per step), or a list of them with one per group. Construction sets lr for epoch 0.)doc")
        .def(py::init([](py::object optimizer, py::object lr_lambda) {
            auto opt = as_optimizer(optimizer, "LambdaLR");
            if (py::isinstance<py::list>(lr_lambda) || py::isinstance<py::tuple>(lr_lambda)) {
                std::vector<LambdaLR::Lambda> fns;
                std::size_t i = 0;
                for (auto f : lr_lambda) fns.push_back(python_lambda(f, "LambdaLR: lr_lambda[" + std::to_string(i++) + "]"));
                return std::make_shared<LambdaLR>(opt, std::move(fns));
            }
            return std::make_shared<LambdaLR>(opt, python_lambda(lr_lambda, "LambdaLR: lr_lambda"));
        }), py::arg("optimizer"), py::arg("lr_lambda"));

    py::class_<StepLR, LRScheduler, std::shared_ptr<StepLR>>(m, "StepLR", R"doc(StepLR(optimizer, step_size, gamma=0.1)

Every step_size epochs each group's lr is multiplied by gamma.)doc")
        .def(py::init([](py::object optimizer, ctpy::Int step_size, double gamma) {
            return std::make_shared<StepLR>(as_optimizer(optimizer, "StepLR"),
                                            to_int(step_size, "StepLR: step_size"), gamma);
        }), py::arg("optimizer"), py::arg("step_size"), py::arg("gamma") = 0.1)
        .def_property_readonly("step_size", &StepLR::step_size)
        .def_property_readonly("gamma", &StepLR::gamma);

    py::class_<CosineWarmupLR, LRScheduler, std::shared_ptr<CosineWarmupLR>>(m, "CosineWarmupLR", R"doc(CosineWarmupLR(optimizer, warmup_iters, lr_decay_iters, min_lr)

nanoGPT's schedule: lr at epoch it = cosine_with_warmup(it, warmup_iters, lr_decay_iters, base_lr, min_lr).)doc")
        .def(py::init([](py::object optimizer, ctpy::Int warmup_iters, ctpy::Int lr_decay_iters, double min_lr) {
            auto opt = as_optimizer(optimizer, "CosineWarmupLR");
            const std::int64_t warmup = to_int(warmup_iters, "CosineWarmupLR: warmup_iters");
            const std::int64_t decay = to_int(lr_decay_iters, "CosineWarmupLR: lr_decay_iters");
            return std::make_shared<CosineWarmupLR>(opt, warmup, decay, min_lr);
        }), py::arg("optimizer"), py::arg("warmup_iters"), py::arg("lr_decay_iters"), py::arg("min_lr"))
        .def_property_readonly("warmup_iters", &CosineWarmupLR::warmup_iters)
        .def_property_readonly("lr_decay_iters", &CosineWarmupLR::lr_decay_iters)
        .def_property_readonly("min_lr", &CosineWarmupLR::min_lr);

    py::class_<ScheduledOptim, std::shared_ptr<ScheduledOptim>>(m, "ScheduledOptim", R"doc(ScheduledOptim(optimizer, lr_mul, d_model, n_warmup_steps)

jadore801120's: step_and_update_lr() does n_steps += 1, sets every group's
lr = lr_mul * d_model^-0.5 * min(n_steps^-0.5, n_steps * n_warmup_steps^-1.5), then steps the optimizer.)doc")
        .def(py::init([](py::object optimizer, double lr_mul, double d_model, ctpy::Int n_warmup_steps) {
            return std::make_shared<ScheduledOptim>(as_optimizer(optimizer, "ScheduledOptim"), lr_mul, d_model,
                                                    to_int(n_warmup_steps, "ScheduledOptim: n_warmup_steps"));
        }), py::arg("optimizer"), py::arg("lr_mul"), py::arg("d_model"), py::arg("n_warmup_steps"))
        .def("step_and_update_lr", &ScheduledOptim::step_and_update_lr, py::call_guard<py::gil_scoped_release>())
        .def("zero_grad", &ScheduledOptim::zero_grad, py::arg("set_to_none") = true)
        .def_property("n_steps", &ScheduledOptim::n_steps, &ScheduledOptim::set_n_steps)
        .def_property_readonly("lr_mul", &ScheduledOptim::lr_mul)
        .def_property_readonly("d_model", &ScheduledOptim::d_model)
        .def_property_readonly("n_warmup_steps", &ScheduledOptim::n_warmup_steps)
        .def_property_readonly("optimizer", &ScheduledOptim::optimizer)
        .def_property_readonly("_optimizer", &ScheduledOptim::optimizer, "jadore801120's name for the inner optimizer.")
        .def("state_dict", [](const ScheduledOptim& s) {
            py::dict d;
            d["n_steps"] = s.n_steps();
            d["lr_mul"] = s.lr_mul();
            d["d_model"] = s.d_model();
            d["n_warmup_steps"] = s.n_warmup_steps();
            return d;
        }, "{'n_steps', 'lr_mul', 'd_model', 'n_warmup_steps'}; save the inner optimizer's state_dict too.")
        .def("load_state_dict", [](ScheduledOptim& s, py::object d) {
            const std::string w = "ScheduledOptim.load_state_dict: state_dict";
            s.set_n_steps(to_whole(dict_item(d, "n_steps", w), w + "['n_steps']"));
        }, py::arg("state_dict"), "Restore n_steps.");

    // --- clipping ------------------------------------------------------------------------------
    m.def("clip_grad_norm_", [](py::object parameters, Real max_norm, Real norm_type, bool error_if_nonfinite) {
        std::vector<Tensor> params = to_tensor_list(parameters, "clip_grad_norm_: parameters", true);
        const double max = to_double(max_norm, "clip_grad_norm_: max_norm"), p = to_double(norm_type, "clip_grad_norm_: norm_type");
        py::gil_scoped_release release;
        return clip_grad_norm_(params, max, p, error_if_nonfinite);
    }, py::arg("parameters"), py::arg("max_norm"), py::arg("norm_type") = 2.0, py::arg("error_if_nonfinite") = false,
       "As torch.nn.utils.clip_grad_norm_: scale all gradients in place by min(max_norm / (total_norm + 1e-6), 1); "
       "returns the total norm (a float) before clipping.");
}

}  // namespace ctpy
