// What the Encoder and the Decoder build alike: the word embedding of one side and the small pre-norm model's
// layer names.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "ctransformer/runtime/allocator.hpp"
#include "ctransformer/nn/embedding.hpp"
#include "ctransformer/nn/transformer_config.hpp"
#include "ctransformer/runtime/random.hpp"

namespace ct::nn::detail {

// Initialised as its reference: torch's N(0, 1) with the padding row zeroed, or N(0, std) over the whole
// table (the pre-norm model's weight.data.normal_(0, 0.1)). The post-norm model's xavier_uniform_ comes later,
// in Transformer.
inline std::shared_ptr<Embedding> make_word_embedding(const TransformerConfig& c, std::size_t vocab,
                                                      std::int64_t pad_idx) {
    auto e = std::make_shared<Embedding>(vocab, c.d_word_vec,
                                         c.embedding_padding_idx ? std::optional<std::int64_t>(pad_idx) : std::nullopt);
    if (c.embedding_init_std) normal_(e->weight, 0.0f, *c.embedding_init_std);
    return e;
}

// The pre-norm model names its encoder layers layer_l (sic), layer_2, layer_3 and its decoder layers layer_1, ...
inline std::string pre_norm_layer_name(std::size_t i, bool encoder) {
    return i == 0 && encoder ? "layer_l" : "layer_" + std::to_string(i + 1);
}

// Refuses a stack of layers whose weights cannot fit in memory together, before the first is built.
// Each layer's buffers are small, so the allocator's per-buffer check passes them one at a time
// until the OOM killer ends the process; here the total is counted (in long double: no overflow)
// and checked at once. `floats_per_layer` need only count the matrices; the biases and norms add
// a few rows.
inline void check_layers_fit(const std::string& what, std::size_t n_layers, long double floats_per_layer) {
    const long double bytes = floats_per_layer * static_cast<long double>(n_layers) * sizeof(float);
    const long double most = static_cast<long double>(SIZE_MAX);
    check_fits_in_memory(bytes >= most ? SIZE_MAX : static_cast<std::size_t>(bytes), what);
}

// The matrices of one attention block (w_qs, w_ks: d_model x n_head d_k; w_vs: d_model x n_head d_v;
// fc: n_head d_v x d_model) and of one feed-forward block (d_model x d_inner, twice).
inline long double attention_floats(std::size_t d_model, std::size_t n_head, std::size_t d_k, std::size_t d_v) {
    const long double d = d_model, h = n_head;
    return 2.0L * d * h * d_k + 2.0L * d * h * d_v;
}
inline long double feed_forward_floats(std::size_t d_model, std::size_t d_inner) {
    return 2.0L * d_model * d_inner;
}

}  // namespace ct::nn::detail
