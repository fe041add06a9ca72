// Encoder (jadore801120's Models.py): Embedding(n_src_vocab, d_word_vec, padding_idx=pad) -> optional
// * sqrt(d_model) -> + positional encoding -> dropout -> LayerNorm(1e-6) -> n_layers EncoderLayers.
// The embedding front follows TransformerConfig (the pre-norm model: embedding + PE only, its layers pre-norm).
#pragma once
#include <memory>
#include <vector>

#include "ctransformer/nn/encoder_layer.hpp"
#include "ctransformer/nn/position_embedding.hpp"

namespace ct::nn {

struct EncoderOutput {
    Tensor output;                     // (b, len, d_model)
    std::vector<Tensor> slf_attns;     // per layer (b, n_head, len, len), when asked for
};

class Encoder : public Module {
public:
    // jadore801120's signature, with the post-norm options.
    Encoder(std::size_t n_src_vocab, std::size_t d_word_vec, std::size_t n_layers, std::size_t n_head,
            std::size_t d_k, std::size_t d_v, std::size_t d_model, std::size_t d_inner, std::int64_t pad_idx,
            float dropout = 0.1f, std::size_t n_position = 200, bool scale_emb = false);
    // From a model configuration (source side: n_src_vocab, src_pad_idx).
    Encoder(const TransformerConfig& config, bool scale_emb);

    // src_seq (b, len) ids; src_mask (b or 1, 1 or len, len), nonzero = may attend, or null.
    // masked_rows_unread (decoding, no graph): the caller reads no output row whose position src_mask hides
    // from every query (a padding mask's pads), so the feed-forward skips them; those rows then hold other
    // finite values than a full forward's. A sentence with no position left unmasked keeps all its rows.
    EncoderOutput forward(const IndexArray& src_seq, const Mask* src_mask, bool return_attns = false,
                          bool masked_rows_unread = false) const;
    // forward for a caller that checked src_seq (sequence_checks.hpp) at its own entry: the ids are scanned
    // once per call, not once per layer of the call chain.
    EncoderOutput forward_valid_ids(const IndexArray& src_seq, const Mask* src_mask, bool return_attns = false,
                                    bool masked_rows_unread = false) const;
    std::string type_name() const override { return "Encoder"; }

    const TransformerConfig config;
    const bool scale_emb;
    std::shared_ptr<Embedding> src_word_emb;
    std::shared_ptr<PositionalEncoding> position_enc;
    std::shared_ptr<PositionEmbedding> embed;        // pre-norm layout only: registered by the Transformer
    std::shared_ptr<Dropout> dropout;                // null unless config.embed_dropout
    std::vector<std::shared_ptr<EncoderLayer>> layers;
    std::shared_ptr<LayerNorm> layer_norm;           // null unless config.embed_layer_norm
};

}  // namespace ct::nn
