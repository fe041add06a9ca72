// Linear(in_features, out_features, bias): y = x W^T + b, parameters "weight" and "bias".
#pragma once
#include "ctransformer/nn/module.hpp"

namespace ct::nn {

class Linear : public Module {
public:
    // torch's default init: weight and bias ~ U(-1/sqrt(in), 1/sqrt(in)).
    Linear(std::size_t in_features, std::size_t out_features, bool bias = true);
    Tensor forward(const Tensor& x) const;
    std::string type_name() const override { return "Linear"; }

    Tensor weight, bias;  // bias is empty when has_bias is false
    const std::size_t in_features, out_features;
    const bool has_bias;
};

}  // namespace ct::nn
