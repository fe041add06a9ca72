#include "ctransformer/nn/dropout.hpp"

#include "ctransformer/error.hpp"
#include "ctransformer/ops/dropout.hpp"

namespace ct::nn {

Dropout::Dropout(float prob) : p(prob) {
    if (!(p >= 0.0f && p <= 1.0f)) throw ValueError("Dropout: p must be a probability in [0, 1], got " + std::to_string(p));
}

Tensor Dropout::forward(const Tensor& x) const { return dropout(x, p, is_training()); }

}  // namespace ct::nn
