// LayerNorm(normalized_shape, eps) over the last dimension: "weight" (ones), "bias" (zeros).
#pragma once
#include "ctransformer/nn/module.hpp"

namespace ct::nn {

class LayerNorm : public Module {
public:
    explicit LayerNorm(std::size_t normalized_shape, float eps = 1e-5f);
    Tensor forward(const Tensor& x) const;
    std::string type_name() const override { return "LayerNorm"; }

    Tensor weight, bias;
    const std::size_t normalized_shape;
    const float eps;
};

}  // namespace ct::nn
