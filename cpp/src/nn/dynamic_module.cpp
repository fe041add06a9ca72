#include "ctransformer/nn/dynamic_module.hpp"

#include "ctransformer/error.hpp"

namespace ct::nn {

void DynamicModule::check_name(const std::string& name) const {
    if (name.empty() || name.find('.') != std::string::npos)   // '.' joins the names of state_dict's keys
        throw ValueError(type_name_ + ": a member's name must be non-empty and hold no '.', got '" + name + "'");
}

void DynamicModule::add_tensor(const std::string& name, const Tensor& t, Kind kind, bool persistent) {
    remove(name);
    auto& slot = owned_[name] = std::make_unique<Tensor>(t);
    if (kind == Kind::Parameter)
        register_parameter(name, slot.get(), true);
    else
        register_buffer(name, slot.get(), persistent);
}

void DynamicModule::set_parameter(const std::string& name, const Tensor& t) {
    check_name(name);
    if (!t.is_leaf() || !t.requires_grad())
        throw TypeError(type_name_ + ": parameter '" + name + "' must be a leaf tensor that requires grad "
                        "(ctransformer.nn.Parameter(...)), got a tensor that " +
                        (t.is_leaf() ? "does not require grad" : "was computed from others"));
    if (registered_as(name) == Kind::Parameter)
        *registered_tensor(name) = t;      // in its place in state_dict's order, as torch's reassignment
    else
        add_tensor(name, t, Kind::Parameter, true);
}

void DynamicModule::set_buffer(const std::string& name, const Tensor& t, std::optional<bool> persistent) {
    check_name(name);
    if (registered_as(name) == Kind::Buffer && (!persistent || *persistent == is_persistent(name)))
        *registered_tensor(name) = t;
    else
        add_tensor(name, t, Kind::Buffer, persistent.value_or(true));
}

void DynamicModule::set_module(const std::string& name, std::shared_ptr<Module> m) {
    check_name(name);
    if (!m) throw ValueError(type_name_ + ": module '" + name + "' is None");
    if (m.get() == this) throw ValueError(type_name_ + ": a module cannot be its own child ('" + name + "')");
    if (registered_as(name) == Kind::Child) {
        replace_module(name, std::move(m));
        return;
    }
    remove(name);
    register_module(name, std::move(m));
}

bool DynamicModule::remove(const std::string& name) {
    if (registered_as(name) == Kind::None) return false;
    unregister(name);
    owned_.erase(name);
    return true;
}

}  // namespace ct::nn
