// DynamicModule: a module whose parameters, buffers and children are named at run time, as
// torch.nn.Module's register_parameter / register_buffer / add_module. It is what a model defined
// outside C++ stands on: a Python subclass of ctransformer.nn.Module is one, its attribute assignments
// (`self.fc = Linear(...)`, `self.scale = Parameter(...)`) registering the members. It owns its tensors
// (handles: the caller's tensor and the registered one share storage and gradient), so setting a name
// again replaces what it holds, in the same place of state_dict's order.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "ctransformer/nn/module.hpp"

namespace ct::nn {

class DynamicModule : public Module {
public:
    explicit DynamicModule(std::string type_name = "Module") : type_name_(std::move(type_name)) {}

    // A parameter: a leaf tensor that requires a gradient (the caller's, not a copy).
    void set_parameter(const std::string& name, const Tensor& t);
    // A buffer: state_dict holds it when persistent. Without `persistent`, a buffer set again keeps its own.
    void set_buffer(const std::string& name, const Tensor& t, std::optional<bool> persistent = std::nullopt);
    void set_module(const std::string& name, std::shared_ptr<Module> m);
    // Forgets `name`; false when it named nothing.
    bool remove(const std::string& name);

    std::string type_name() const override { return type_name_; }
    void set_type_name(std::string name) { type_name_ = std::move(name); }

private:
    void check_name(const std::string& name) const;
    void add_tensor(const std::string& name, const Tensor& t, Kind kind, bool persistent);
    std::map<std::string, std::unique_ptr<Tensor>> owned_;   // unique_ptr: registered by address
    std::string type_name_;
};

}  // namespace ct::nn
