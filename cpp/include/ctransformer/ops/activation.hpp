// Pointwise non-linearities.
#pragma once
#include "ctransformer/runtime/tensor.hpp"

namespace ct {

Tensor relu(const Tensor& x);
// The tanh approximation (the GPT's; torch's approximate='tanh'):
// gelu(z) = 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))).
Tensor gelu(const Tensor& x);
// The exact form (torch's F.gelu default, Hugging Face's 'gelu'): gelu(z) = z Phi(z) = 0.5 z (1 + erf(z / sqrt 2)).
Tensor gelu_erf(const Tensor& x);
// silu(z) = z sigmoid(z) (torch's F.silu, Hugging Face's 'swish').
Tensor silu(const Tensor& x);

}  // namespace ct
