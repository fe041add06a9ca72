#include "ctransformer/nn/linear.hpp"

#include <cmath>

#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/error.hpp"
#include "ctransformer/ops/linear.hpp"
#include "ctransformer/runtime/random.hpp"

namespace ct::nn {

Linear::Linear(std::size_t in, std::size_t out, bool with_bias)
    : in_features(in), out_features(out), has_bias(with_bias) {
    const float bound = in > 0 ? 1.0f / std::sqrt(float(in)) : 0.0f;
    weight = Tensor::zeros({out, in});
    uniform_(weight, -bound, bound);
    register_parameter("weight", &weight);
    if (has_bias) {
        bias = Tensor::zeros({out});
        uniform_(bias, -bound, bound);
        register_parameter("bias", &bias);
    }
}

Tensor Linear::forward(const Tensor& x, float alpha) const {
    const Tensor* b = has_bias ? &bias : nullptr;
    return int8_weight_ ? linear_int8(x, *int8_weight_, b, alpha, &weight) : linear(x, weight, b, alpha);
}

void Linear::quantize_self(bool int8) {
    int8_weight_ = int8 ? std::make_shared<const Int8Weight>(quantize_weight_int8(weight.data(), out_features, in_features))
                        : nullptr;
}

void Linear::set_int8_weight(std::shared_ptr<const Int8Weight> w) {
    if (!w || w->out_features != out_features || w->in_features != in_features)
        throw ValueError("set_int8_weight: expected an Int8Weight of shape (" + std::to_string(out_features) + ", " +
                         std::to_string(in_features) + ")" +
                         (w ? ", got (" + std::to_string(w->out_features) + ", " + std::to_string(w->in_features) + ")"
                            : ", got none"));
    int8_weight_ = std::move(w);
}

}  // namespace ct::nn
