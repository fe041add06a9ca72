// Pointwise non-linearities.
#pragma once
#include "ctransformer/runtime/tensor.hpp"

namespace ct {

Tensor relu(const Tensor& x);
// The tanh approximation (the GPT's; torch's approximate='tanh'):
// gelu(z) = 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))).
Tensor gelu(const Tensor& x);

}  // namespace ct
