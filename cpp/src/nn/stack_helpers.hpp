// What the Encoder and the Decoder build alike: the word embedding of one side and seed 003's
// layer names.
#pragma once
#include <memory>
#include <string>

#include "ctransformer/nn/embedding.hpp"
#include "ctransformer/nn/transformer_config.hpp"
#include "ctransformer/random.hpp"

namespace ct::nn::detail {

// Initialised as its seed: torch's N(0, 1) with the padding row zeroed, or N(0, std) over the whole
// table (seed 003's weight.data.normal_(0, 0.1)). Seed 000's xavier_uniform_ comes later, in Transformer.
inline std::shared_ptr<Embedding> make_word_embedding(const TransformerConfig& c, std::size_t vocab,
                                                      std::int64_t pad_idx) {
    auto e = std::make_shared<Embedding>(vocab, c.d_word_vec,
                                         c.embedding_padding_idx ? std::optional<std::int64_t>(pad_idx) : std::nullopt);
    if (c.embedding_init_std) normal_(e->weight, 0.0f, *c.embedding_init_std);
    return e;
}

// Seed 003 names its encoder layers layer_l (sic), layer_2, layer_3 and its decoder layers layer_1, ...
inline std::string seed003_layer_name(std::size_t i, bool encoder) {
    return i == 0 && encoder ? "layer_l" : "layer_" + std::to_string(i + 1);
}

}  // namespace ct::nn::detail
