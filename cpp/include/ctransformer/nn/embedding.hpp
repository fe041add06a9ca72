// Embedding(num_embeddings, embedding_dim, padding_idx): a lookup table "weight".
#pragma once
#include <optional>

#include "ctransformer/nn/module.hpp"

namespace ct::nn {

class Embedding : public Module {
public:
    // torch's init: N(0, 1), with the padding row zeroed.
    Embedding(std::size_t num_embeddings, std::size_t embedding_dim,
              std::optional<std::int64_t> padding_idx = std::nullopt);
    Tensor forward(const IndexArray& ids) const;
    // forward without the scan of ids: for a caller that checked them (ops/embedding.hpp's detail).
    Tensor forward_valid_ids(const IndexArray& ids) const;
    std::string type_name() const override { return "Embedding"; }

    Tensor weight;
    const std::size_t num_embeddings, embedding_dim;
    const std::optional<std::int64_t> padding_idx;  // normalised to be non-negative
};

}  // namespace ct::nn
