// Sequential: children named "0", "1", ... as torch.nn.Sequential, kept for state-dict names such
// as the pre-norm model's FullyConnectedOutput.fc.0.weight. Its owner runs the children itself (their
// forwards differ), so it has no forward; an index may be skipped (the pre-norm model's parameter-free ReLU
// at "1" is applied by the owner).
#pragma once
#include <memory>
#include <string>

#include "ctransformer/nn/module.hpp"

namespace ct::nn {

class Sequential : public Module {
public:
    template <class M>
    std::shared_ptr<M> add(std::size_t index, std::shared_ptr<M> m) {
        return register_module(std::to_string(index), std::move(m));
    }
    std::string type_name() const override { return "Sequential"; }
};

}  // namespace ct::nn
