// Gradient clipping as torch.nn.utils.clip_grad_norm_: the norm of all gradients taken together,
// then every gradient scaled in place by min(max_norm / (total_norm + 1e-6), 1).
#pragma once
#include <limits>
#include <vector>

#include "ctransformer/runtime/tensor.hpp"

namespace ct::optim {

// Tensors without a gradient are skipped; returns the total norm before clipping (0 if no
// gradient). norm_type is p > 0 or infinity. error_if_nonfinite: throw when the norm is inf/NaN.
float clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                      bool error_if_nonfinite = false);

}  // namespace ct::optim
