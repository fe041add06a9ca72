// KL divergence as torch.nn.functional.kl_div with log-probability input:
// pointwise target * (log target - input), 0 where target == 0.
// Reductions: 'sum', 'batchmean' (sum / N), 'mean' (sum / numel), 'none'.
#pragma once
#include "ctransformer/loss/cross_entropy.hpp"
#include "ctransformer/runtime/tensor.hpp"

namespace ct {

Tensor kl_div(const Tensor& log_probs, const Tensor& target, Reduction reduction = Reduction::Mean);

}  // namespace ct
