// Inverted dropout: zero each element with probability p, scale the survivors by 1/(1-p).
// The mask is drawn from the library's generator (manual_seed).
#pragma once
#include "ctransformer/runtime/tensor.hpp"

namespace ct {

Tensor dropout(const Tensor& x, float p, bool training);

}  // namespace ct
