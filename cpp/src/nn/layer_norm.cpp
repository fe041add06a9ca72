#include "ctransformer/nn/layer_norm.hpp"

#include "ctransformer/ops/layer_norm.hpp"

namespace ct::nn {

LayerNorm::LayerNorm(std::size_t d, float e) : normalized_shape(d), eps(e) {
    weight = Tensor::full({d}, 1.0f);
    bias = Tensor::zeros({d});
    register_parameter("weight", &weight);
    register_parameter("bias", &bias);
}

Tensor LayerNorm::forward(const Tensor& x) const { return layer_norm(x, &weight, &bias, eps); }

}  // namespace ct::nn
