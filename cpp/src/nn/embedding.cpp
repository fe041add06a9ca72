#include "ctransformer/nn/embedding.hpp"

#include <algorithm>

#include "ctransformer/error.hpp"
#include "ctransformer/ops/embedding.hpp"
#include "ctransformer/runtime/random.hpp"

namespace ct::nn {

namespace {
std::optional<std::int64_t> normalised_padding(std::optional<std::int64_t> p, std::size_t n) {
    if (!p) return p;
    const std::int64_t v = *p < 0 ? *p + std::int64_t(n) : *p;
    if (v < 0 || v >= std::int64_t(n))
        throw IndexError("Embedding: padding_idx must be within num_embeddings = " + std::to_string(n) + ", got " +
                         std::to_string(*p));
    return v;
}
}  // namespace

Embedding::Embedding(std::size_t n, std::size_t d, std::optional<std::int64_t> pad)
    : num_embeddings(n), embedding_dim(d), padding_idx(normalised_padding(pad, n)) {
    weight = Tensor::zeros({n, d});
    normal_(weight, 0.0f, 1.0f);
    if (padding_idx) std::fill_n(weight.data() + std::size_t(*padding_idx) * d, d, 0.0f);
    register_parameter("weight", &weight);
}

Tensor Embedding::forward(const IndexArray& ids) const { return embedding(ids, weight, padding_idx); }

Tensor Embedding::forward_valid_ids(const IndexArray& ids) const {
    return detail::embedding_of_valid_ids(ids, weight, padding_idx);
}

}  // namespace ct::nn
