#include "ctransformer/nn/position_embedding.hpp"

#include "ctransformer/error.hpp"

namespace ct::nn {

PositionEmbedding::PositionEmbedding(std::shared_ptr<Embedding> e, std::shared_ptr<PositionalEncoding> p)
    : embed(std::move(e)), position_enc(std::move(p)) {
    if (!embed || !position_enc) throw ValueError("PositionEmbedding: needs an Embedding and a PositionalEncoding");
    register_buffer("pe", &position_enc->pos_table);   // the pre-norm reference: self.register_buffer('pe', pe)
    register_module("embed", embed);
}

Tensor PositionEmbedding::forward(const IndexArray& ids) const { return position_enc->forward(embed->forward(ids)); }

}  // namespace ct::nn
