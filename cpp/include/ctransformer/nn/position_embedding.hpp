// The small pre-norm model's PositionEmbedding: a token embedding "embed" plus its sinusoid table, a buffer "pe".
// In the pre-norm layout the Transformer registers one per side (embed_x, embed_y); they share their
// Embedding and PositionalEncoding with the Encoder / Decoder, which run them.
#pragma once
#include <memory>

#include "ctransformer/nn/embedding.hpp"
#include "ctransformer/nn/positional_encoding.hpp"

namespace ct::nn {

class PositionEmbedding : public Module {
public:
    PositionEmbedding(std::shared_ptr<Embedding> embed, std::shared_ptr<PositionalEncoding> position_enc);
    Tensor forward(const IndexArray& ids) const;   // embed(ids) + pe[:, :len]
    std::string type_name() const override { return "PositionEmbedding"; }

    std::shared_ptr<Embedding> embed;
    std::shared_ptr<PositionalEncoding> position_enc;
};

}  // namespace ct::nn
