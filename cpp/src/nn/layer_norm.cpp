#include "ctransformer/nn/layer_norm.hpp"

#include "ctransformer/error.hpp"
#include "ctransformer/ops/layer_norm.hpp"

namespace ct::nn {

LayerNorm::LayerNorm(std::size_t d, float e) : normalized_shape(d), eps(e) {
    // Refused here rather than at the first forward, which may be far from where the module was made.
    if (!(e >= 0.0f)) throw ValueError("LayerNorm: eps must be >= 0, got " + std::to_string(e));
    weight = Tensor::full({d}, 1.0f);
    bias = Tensor::zeros({d});
    register_parameter("weight", &weight);
    register_parameter("bias", &bias);
}

Tensor LayerNorm::forward(const Tensor& x) const { return layer_norm(x, &weight, &bias, eps); }

}  // namespace ct::nn
