// Decoder (jadore801120's Models.py): the Encoder's front on the target ids, then DecoderLayers
// (masked self-attention, encoder-decoder attention, feed-forward). Cached decoding runs the same
// forward with a Cache (decode/incremental_decoder.hpp): target positions fed a few at a time.
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
    // jadore801120's signature, with the post-norm options.
    Decoder(std::size_t n_trg_vocab, std::size_t d_word_vec, std::size_t n_layers, std::size_t n_head,
            std::size_t d_k, std::size_t d_v, std::size_t d_model, std::size_t d_inner, std::int64_t pad_idx,
            std::size_t n_position = 200, float dropout = 0.1f, bool scale_emb = false);
    // From a model configuration (target side: n_trg_vocab, trg_pad_idx).
    Decoder(const TransformerConfig& config, bool scale_emb);

    // Cached decoding's state: each layer's keys/values, and the target positions fed so far.
    struct Cache {
        std::vector<DecoderLayer::Cache> layers;
        std::size_t length = 0;
    };

    // trg_seq (b, lt) ids; trg_mask (b or 1, lt, lt); enc_output (b, ls, d_model); src_mask (b or 1, 1, ls).
    DecoderOutput forward(const IndexArray& trg_seq, const Mask* trg_mask, const Tensor& enc_output,
                          const Mask* src_mask, bool return_attns = false) const;
    // The same with a cache (start_cache): trg_seq (b, s) holds target positions cache.length ..
    // cache.length + s - 1, embedded there (positional rows from cache.length); each layer appends
    // their keys/values and attends over every position held (trg_mask, if any, (b or 1, s,
    // cache.length + s); none is needed for s = 1) and over the encoder output the cache was started
    // with. The cache then holds s more positions.
    DecoderOutput forward(const IndexArray& trg_seq, const Mask* trg_mask, Cache& cache, const Mask* src_mask,
                          bool return_attns = false) const;
    // Both forwards for a caller that checked trg_seq (sequence_checks.hpp) at its own entry: the ids are
    // scanned once per call, not once per layer of the call chain.
    DecoderOutput forward_valid_ids(const IndexArray& trg_seq, const Mask* trg_mask, const Tensor& enc_output,
                                    const Mask* src_mask, bool return_attns = false) const;
    DecoderOutput forward_valid_ids(const IndexArray& trg_seq, const Mask* trg_mask, Cache& cache,
                                    const Mask* src_mask, bool return_attns = false) const;
    // A cache with no target position, for the source whose encoder output is enc_output (b, ls, d_model).
    Cache start_cache(const Tensor& enc_output) const;
    // One target position for sequences of their own lengths (a continuous batch; decode/translation_batch.hpp):
    // ids[r] is row r's token; sequence s owns rows [offsets[s], offsets[s + 1]) and caches[s], whose length is
    // the position its rows are fed at (each row embedded at its own sequence's position). Each cache's
    // cross-attention holds its own source's keys/values (no source mask: no pads). Every cache then holds one
    // more position. Returns the last layer's output (rows, d_model). ids are checked here.
    Tensor forward_sequences(const std::vector<std::int64_t>& ids, const std::vector<Cache*>& caches,
                             const std::vector<std::size_t>& offsets) const;
    std::string type_name() const override { return "Decoder"; }

    const TransformerConfig config;
    const bool scale_emb;
    std::shared_ptr<Embedding> trg_word_emb;
    std::shared_ptr<PositionalEncoding> position_enc;
    std::shared_ptr<PositionEmbedding> embed;        // pre-norm layout only: registered by the Transformer
    std::shared_ptr<Dropout> dropout;
    std::vector<std::shared_ptr<DecoderLayer>> layers;
    std::shared_ptr<LayerNorm> layer_norm;

private:
    // The target ids embedded at positions starting from start[r] (one start for every row when it has one entry):
    // the word embedding, its scale, the positions, dropout and the layout's embedding LayerNorm.
    Tensor embed_target(const IndexArray& trg_seq, const std::vector<std::size_t>& start) const;
    // Both forwards: enc_output is read without a cache, the cache's keys/values with one.
    DecoderOutput run(const IndexArray& trg_seq, const Mask* trg_mask, const Tensor* enc_output, const Mask* src_mask,
                      bool return_attns, Cache* cache, bool check_ids) const;
};

}  // namespace ct::nn
