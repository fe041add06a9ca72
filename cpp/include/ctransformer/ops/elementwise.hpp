// Elementwise arithmetic with NumPy broadcasting. Backward sums the gradient over the
// dimensions an input was broadcast along, so it lands in the input's own shape.
#pragma once
#include "ctransformer/runtime/tensor.hpp"

namespace ct {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& x, float s);          // x * s
Tensor div_scalar(const Tensor& x, float s);     // x / s (kept apart from scale: x / s != x * (1/s) in float)
Tensor add_scalar(const Tensor& x, float s);     // x + s
Tensor neg(const Tensor& x);

}  // namespace ct
