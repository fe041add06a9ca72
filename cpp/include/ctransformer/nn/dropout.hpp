// Dropout(p): active in train(), the identity in eval().
#pragma once
#include "ctransformer/nn/module.hpp"

namespace ct::nn {

class Dropout : public Module {
public:
    explicit Dropout(float p = 0.5f);
    Tensor forward(const Tensor& x) const;
    std::string type_name() const override { return "Dropout"; }

    const float p;
};

}  // namespace ct::nn
