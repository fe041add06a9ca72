#include "ctransformer/nn/linear.hpp"

#include <cmath>

#include "ctransformer/ops/linear.hpp"
#include "ctransformer/random.hpp"

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

Tensor Linear::forward(const Tensor& x) const { return linear(x, weight, has_bias ? &bias : nullptr); }

}  // namespace ct::nn
