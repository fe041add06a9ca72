// Decoder (seed 000, Models.py): the Encoder's front on the target ids, then DecoderLayers
// (masked self-attention, encoder-decoder attention, feed-forward).
#pragma once
#include <memory>
#include <vector>

#include "ctransformer/nn/decoder_layer.hpp"
#include "ctransformer/nn/position_embedding.hpp"

namespace ct::nn {

struct DecoderOutput {
    Tensor output;                                // (b, len, d_model)
    std::vector<Tensor> slf_attns, enc_attns;     // per layer, when asked for
};

class Decoder : public Module {
public:
    // The seed's signature, with seed 000's options.
    Decoder(std::size_t n_trg_vocab, std::size_t d_word_vec, std::size_t n_layers, std::size_t n_head,
            std::size_t d_k, std::size_t d_v, std::size_t d_model, std::size_t d_inner, std::int64_t pad_idx,
            std::size_t n_position = 200, float dropout = 0.1f, bool scale_emb = false);
    // From a model configuration (target side: n_trg_vocab, trg_pad_idx).
    Decoder(const TransformerConfig& config, bool scale_emb);

    // trg_seq (b, lt) ids; trg_mask (b or 1, lt, lt); enc_output (b, ls, d_model); src_mask (b or 1, 1, ls).
    DecoderOutput forward(const IndexArray& trg_seq, const Mask* trg_mask, const Tensor& enc_output,
                          const Mask* src_mask, bool return_attns = false) const;
    std::string type_name() const override { return "Decoder"; }

    const TransformerConfig config;
    const bool scale_emb;
    std::shared_ptr<Embedding> trg_word_emb;
    std::shared_ptr<PositionalEncoding> position_enc;
    std::shared_ptr<PositionEmbedding> embed;        // seed-003 layout only: registered by the Transformer
    std::shared_ptr<Dropout> dropout;
    std::vector<std::shared_ptr<DecoderLayer>> layers;
    std::shared_ptr<LayerNorm> layer_norm;
};

}  // namespace ct::nn
