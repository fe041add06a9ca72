// Module: a tree of named children, parameters and buffers, as torch.nn.Module.
//
// A module registers pointers to its own Tensor members, so tying two parameters is plain
// assignment (`prj->weight = emb->weight`): both names then hold one tensor, one gradient and,
// since parameters() skips repeats, one optimizer slot. state_dict() lists every name, repeats
// included, in torch's order: a module's parameters, then its buffers, then each child's.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ctransformer/runtime/tensor.hpp"

namespace ct::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
public:
    virtual ~Module() = default;
    Module() = default;
    Module(const Module&) = delete;             // members are registered by address
    Module& operator=(const Module&) = delete;

    NamedTensors named_parameters() const;      // each tensor once, under its first name
    std::vector<Tensor> parameters() const;
    NamedTensors named_buffers() const;
    NamedTensors state_dict() const;            // parameters and buffers, every name
    std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }

    struct LoadResult {
        std::vector<std::string> missing_keys, unexpected_keys;
    };
    // Copies the arrays into the module's tensors in place (optimizers keep their references).
    // A shape mismatch always throws; with strict, so does a missing or unexpected key.
    LoadResult load_state_dict(const std::map<std::string, Array>& state, bool strict = true);

    // int8 inference (int8.hpp): quantize("int8") gives every Linear in the tree an int8 copy of its
    // weight (per output row scales) that its forward then uses, activations quantised per row on the fly;
    // dequantize() drops the copies. The fp32 parameters are left as they are (a tied embedding keeps
    // reading them), and load_state_dict re-quantises from the loaded weights. A quantised Linear is for
    // inference: its forward refuses to run where a gradient would be needed.
    void quantize(const std::string& dtype);
    void dequantize();
    // "int8" when some Linear in the tree is quantised, else "".
    std::string quantization() const;

    void train(bool on = true);
    void eval() { train(false); }
    bool is_training() const { return training_; }
    void zero_grad();
    std::size_t num_parameters() const;         // elements over parameters(), tied ones once
    virtual std::string type_name() const = 0;

    // What `name` is registered as in this module (not its children).
    enum class Kind { None, Parameter, Buffer, Child };
    Kind registered_as(const std::string& name) const;

protected:
    // This module's own part of quantize / dequantize / quantization (children are walked by the callers).
    virtual void quantize_self(bool /*int8*/) {}
    virtual bool quantized_self() const { return false; }
    void register_parameter(const std::string& name, Tensor* t, bool requires_grad = true);
    void register_buffer(const std::string& name, Tensor* t, bool persistent = true);
    template <class M>
    std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
        children_.emplace_back(name, m);
        return m;
    }
    // For modules whose members are named at run time (DynamicModule).
    // The registered parameter or buffer of that name (null if there is none).
    Tensor* registered_tensor(const std::string& name) const;
    bool is_persistent(const std::string& buffer) const;
    // Puts `m` in the place of the child `name` (its position, and so torch's state_dict order, kept).
    void replace_module(const std::string& name, std::shared_ptr<Module> m);
    // Forgets `name`, whatever it was registered as.
    void unregister(const std::string& name);

private:
    void collect(const std::string& prefix, NamedTensors& out, bool params, bool buffers, bool all_buffers) const;
    std::vector<std::pair<std::string, Tensor*>> params_;
    std::vector<std::pair<std::string, Tensor*>> buffers_;
    std::vector<std::string> non_persistent_;
    std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
    bool training_ = true;
};

// A list of modules named "0", "1", ... (torch.nn.ModuleList), e.g. `layer_stack`.
template <class M>
class ModuleList : public Module {
public:
    void append(std::shared_ptr<M> m) {
        items_.push_back(register_module(std::to_string(items_.size()), std::move(m)));
    }
    std::size_t size() const { return items_.size(); }
    M& operator[](std::size_t i) const { return *items_[i]; }
    const std::vector<std::shared_ptr<M>>& items() const { return items_; }
    std::string type_name() const override { return "ModuleList"; }

private:
    std::vector<std::shared_ptr<M>> items_;
};

}  // namespace ct::nn
