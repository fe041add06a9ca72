#include "ctransformer/nn/module.hpp"

#include <algorithm>
#include <set>

#include "ctransformer/error.hpp"

namespace ct::nn {

void Module::register_parameter(const std::string& name, Tensor* t, bool requires_grad) {
    t->set_requires_grad(requires_grad);
    params_.emplace_back(name, t);
}

void Module::register_buffer(const std::string& name, Tensor* t, bool persistent) {
    buffers_.emplace_back(name, t);
    if (!persistent) non_persistent_.push_back(name);
}

Module::Kind Module::registered_as(const std::string& name) const {
    auto named = [&name](const auto& entry) { return entry.first == name; };
    if (std::any_of(params_.begin(), params_.end(), named)) return Kind::Parameter;
    if (std::any_of(buffers_.begin(), buffers_.end(), named)) return Kind::Buffer;
    if (std::any_of(children_.begin(), children_.end(), named)) return Kind::Child;
    return Kind::None;
}

Tensor* Module::registered_tensor(const std::string& name) const {
    for (const auto* list : {&params_, &buffers_})
        for (const auto& [n, t] : *list)
            if (n == name) return t;
    return nullptr;
}

bool Module::is_persistent(const std::string& buffer) const {
    return std::find(non_persistent_.begin(), non_persistent_.end(), buffer) == non_persistent_.end();
}

void Module::replace_module(const std::string& name, std::shared_ptr<Module> m) {
    for (auto& [n, child] : children_)
        if (n == name) child = std::move(m);
}

void Module::unregister(const std::string& name) {
    auto named = [&name](const auto& entry) { return entry.first == name; };
    params_.erase(std::remove_if(params_.begin(), params_.end(), named), params_.end());
    buffers_.erase(std::remove_if(buffers_.begin(), buffers_.end(), named), buffers_.end());
    children_.erase(std::remove_if(children_.begin(), children_.end(), named), children_.end());
    non_persistent_.erase(std::remove(non_persistent_.begin(), non_persistent_.end(), name), non_persistent_.end());
}

void Module::collect(const std::string& prefix, NamedTensors& out, bool params, bool buffers, bool all_buffers) const {
    if (params)
        for (const auto& [name, t] : params_) out.emplace_back(prefix + name, *t);
    if (buffers)
        for (const auto& [name, t] : buffers_) {
            if (is_persistent(name) || all_buffers) out.emplace_back(prefix + name, *t);
        }
    for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out, params, buffers, all_buffers);
}

NamedTensors Module::named_parameters() const {
    NamedTensors all, unique;
    collect("", all, true, false, false);
    std::set<const TensorImpl*> seen;
    for (auto& entry : all)
        if (seen.insert(entry.second.impl().get()).second) unique.push_back(std::move(entry));
    return unique;
}

std::vector<Tensor> Module::parameters() const {
    std::vector<Tensor> out;
    for (auto& [name, t] : named_parameters()) out.push_back(t);
    return out;
}

NamedTensors Module::named_buffers() const {
    NamedTensors out;
    collect("", out, false, true, true);
    return out;
}

NamedTensors Module::state_dict() const {
    NamedTensors out;
    collect("", out, true, true, false);
    return out;
}

Module::LoadResult Module::load_state_dict(const std::map<std::string, Array>& state, bool strict) {
    LoadResult result;
    std::vector<std::string> mismatched;
    std::set<std::string> known;
    const NamedTensors own = state_dict();
    for (const auto& [name, t] : own) {
        known.insert(name);
        auto it = state.find(name);
        if (it == state.end()) {
            result.missing_keys.push_back(name);
            continue;
        }
        const Shape want = t.shape(), got(it->second.shape().begin(), it->second.shape().end());
        if (want != got) mismatched.push_back(name + ": expected shape " + shape_str(want) + ", got " + shape_str(got));
    }
    for (const auto& [name, array] : state)
        if (!known.count(name)) result.unexpected_keys.push_back(name);

    auto join = [](const std::vector<std::string>& v) {
        std::string s;
        for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
        return s;
    };
    std::string errors;
    if (!mismatched.empty()) errors += "\n  size mismatch: " + join(mismatched);
    if (strict && !result.missing_keys.empty()) errors += "\n  missing keys: " + join(result.missing_keys);
    if (strict && !result.unexpected_keys.empty()) errors += "\n  unexpected keys: " + join(result.unexpected_keys);
    if (!errors.empty()) throw RuntimeError("load_state_dict: error(s) loading state_dict for " + type_name() + ":" + errors);

    for (const auto& [name, t] : own) {  // nothing is written unless everything matched
        auto it = state.find(name);
        if (it != state.end()) std::copy(it->second.data(), it->second.data() + it->second.size(), t.data());
    }
    if (!quantization().empty()) quantize("int8");  // the int8 copies follow the loaded weights
    return result;
}

void Module::quantize(const std::string& dtype) {
    if (dtype != "int8") throw ValueError("quantize: dtype must be 'int8', got '" + dtype + "'");
    quantize_self(true);
    for (auto& [name, child] : children_) child->quantize(dtype);
}

void Module::dequantize() {
    quantize_self(false);
    for (auto& [name, child] : children_) child->dequantize();
}

std::string Module::quantization() const {
    if (quantized_self()) return "int8";
    for (const auto& [name, child] : children_)
        if (!child->quantization().empty()) return "int8";
    return "";
}

void Module::train(bool on) {
    training_ = on;
    for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
    for (auto& t : parameters()) t.zero_grad();
}

std::size_t Module::num_parameters() const {
    std::size_t n = 0;
    for (const auto& t : parameters()) n += t.numel();
    return n;
}

}  // namespace ct::nn
