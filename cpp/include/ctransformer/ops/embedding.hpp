// Row lookup: out[..., :] = weight[ids[...], :]. No gradient flows into the padding row.
#pragma once
#include <optional>

#include "ctransformer/runtime/tensor.hpp"

namespace ct {

// padding_idx may be negative (counted from the end, as torch).
Tensor embedding(const IndexArray& ids, const Tensor& weight, std::optional<std::int64_t> padding_idx = std::nullopt);

}  // namespace ct
