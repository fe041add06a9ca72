// Cross-entropy from logits, as torch.nn.functional.cross_entropy for (N, C) logits and (N,)
// class targets: loss_i = (1 - s) * -log p[i, t_i] + s / C * sum_c -log p[i, c], rows whose target
// is ignore_index contribute nothing; 'mean' divides by the number of rows not ignored.
#pragma once
#include <string>

#include "ctransformer/runtime/tensor.hpp"

namespace ct {

enum class Reduction { None, Mean, Sum, BatchMean };
Reduction parse_reduction(const std::string& name, const char* fn, bool allow_batchmean);

Tensor cross_entropy(const Tensor& logits, const IndexArray& target, std::int64_t ignore_index = -100,
                     Reduction reduction = Reduction::Mean, float label_smoothing = 0.0f);

}  // namespace ct
