// Row lookup: out[..., :] = weight[ids[...], :]. No gradient flows into the padding row.
#pragma once
#include <optional>

#include "ctransformer/runtime/tensor.hpp"

namespace ct {

// padding_idx may be negative (counted from the end, as torch).
Tensor embedding(const IndexArray& ids, const Tensor& weight, std::optional<std::int64_t> padding_idx = std::nullopt);

namespace detail {
// embedding() without the scan of ids against the vocabulary: for callers that checked them once at their
// entry point (the models' forward, a decoding step). An id outside [0, rows of weight) reads out of bounds.
Tensor embedding_of_valid_ids(const IndexArray& ids, const Tensor& weight, std::optional<std::int64_t> padding_idx);
}  // namespace detail

}  // namespace ct
