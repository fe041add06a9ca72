// Linear(in_features, out_features, bias): y = x W^T + b, parameters "weight" and "bias".
#pragma once
#include <memory>

#include "ctransformer/int8.hpp"
#include "ctransformer/nn/module.hpp"

namespace ct::nn {

class Linear : public Module {
public:
    // torch's default init: weight and bias ~ U(-1/sqrt(in), 1/sqrt(in)).
    Linear(std::size_t in_features, std::size_t out_features, bool bias = true);
    Tensor forward(const Tensor& x) const { return forward(x, 1.0f); }
    // alpha x W^T + b, the scale folded into the product (ops/linear.hpp).
    Tensor forward(const Tensor& x, float alpha) const;
    std::string type_name() const override { return "Linear"; }
    // The weight in int8 while quantised (Module::quantize), else null.
    const std::shared_ptr<const Int8Weight>& int8_weight() const { return int8_weight_; }
    // A quantised weight from elsewhere (a quantised checkpoint), used as it is; ValueError unless it is
    // (out_features, in_features).
    void set_int8_weight(std::shared_ptr<const Int8Weight> w);

    Tensor weight, bias;  // bias is empty when has_bias is false
    const std::size_t in_features, out_features;
    const bool has_bias;

protected:
    void quantize_self(bool int8) override;
    bool quantized_self() const override { return bool(int8_weight_); }

private:
    std::shared_ptr<const Int8Weight> int8_weight_;
};

}  // namespace ct::nn
