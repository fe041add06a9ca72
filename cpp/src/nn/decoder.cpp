#include "ctransformer/nn/decoder.hpp"

#include <algorithm>
#include <cmath>

#include "ctransformer/error.hpp"
#include "ctransformer/ops/elementwise.hpp"
#include "ctransformer/ops/shape.hpp"
#include "sequence_checks.hpp"
#include "stack_helpers.hpp"

namespace ct::nn {

Decoder::Decoder(std::size_t n_trg_vocab, std::size_t d_word_vec, std::size_t n_layers, std::size_t n_head,
                 std::size_t d_k, std::size_t d_v, std::size_t d_model, std::size_t d_inner, std::int64_t pad_idx,
                 std::size_t n_position, float dropout, bool scale)
    : Decoder(TransformerConfig::post_norm(n_trg_vocab, n_trg_vocab, pad_idx, pad_idx, d_word_vec, d_model, d_inner,
                                          n_layers, n_head, d_k, d_v, dropout, n_position),
              scale) {}

Decoder::Decoder(const TransformerConfig& c, bool scale) : config(c), scale_emb(scale) {
    TransformerConfig check = c;
    check.emb_src_trg_weight_sharing = false;
    check.validate();
    trg_word_emb = detail::make_word_embedding(c, c.n_trg_vocab, c.trg_pad_idx);
    position_enc = std::make_shared<PositionalEncoding>(c.d_word_vec, c.n_position, c.pe_formula, c.layout);
    if (c.embed_dropout) dropout = std::make_shared<Dropout>(c.dropout);
    detail::check_layers_fit("Decoder: the weights of n_layers=" + std::to_string(c.n_layers) + " layers", c.n_layers,
                             2 * detail::attention_floats(c.d_model, c.n_head, c.d_k, c.d_v) +
                                 detail::feed_forward_floats(c.d_model, c.d_inner));
    const SublayerOptions o = c.sublayer_options();
    for (std::size_t i = 0; i < c.n_layers; ++i)
        layers.push_back(std::make_shared<DecoderLayer>(c.d_model, c.d_inner, c.n_head, c.d_k, c.d_v, c.dropout, o));
    if (c.embed_layer_norm) layer_norm = std::make_shared<LayerNorm>(c.d_model, c.layer_norm_eps);

    if (c.layout == Layout::Marian) {   // MarianDecoder: embed_tokens, embed_positions, layers
        register_module("embed_tokens", trg_word_emb);
        register_module("embed_positions", position_enc);
        if (dropout) register_module("dropout", dropout);
        auto stack = std::make_shared<ModuleList<DecoderLayer>>();
        for (auto& l : layers) stack->append(l);
        register_module("layers", stack);
        if (layer_norm) register_module("layer_norm", layer_norm);
    } else if (c.layout == Layout::PostNorm) {
        register_module("trg_word_emb", trg_word_emb);
        register_module("position_enc", position_enc);
        if (dropout) register_module("dropout", dropout);
        auto stack = std::make_shared<ModuleList<DecoderLayer>>();
        for (auto& l : layers) stack->append(l);
        register_module("layer_stack", stack);
        if (layer_norm) register_module("layer_norm", layer_norm);
    } else {   // pre-norm layout: the embedding lives in the model's embed_y
        embed = std::make_shared<PositionEmbedding>(trg_word_emb, position_enc);
        if (dropout) register_module("dropout", dropout);
        for (std::size_t i = 0; i < layers.size(); ++i)
            register_module(detail::pre_norm_layer_name(i, false), layers[i]);
        if (layer_norm) register_module("layer_norm", layer_norm);
    }
}

DecoderOutput Decoder::forward(const IndexArray& trg_seq, const Mask* trg_mask, const Tensor& enc_output,
                               const Mask* src_mask, bool return_attns) const {
    return run(trg_seq, trg_mask, &enc_output, src_mask, return_attns, nullptr, true);
}

DecoderOutput Decoder::forward(const IndexArray& trg_seq, const Mask* trg_mask, Cache& cache, const Mask* src_mask,
                               bool return_attns) const {
    return run(trg_seq, trg_mask, nullptr, src_mask, return_attns, &cache, true);
}

DecoderOutput Decoder::forward_valid_ids(const IndexArray& trg_seq, const Mask* trg_mask, const Tensor& enc_output,
                                         const Mask* src_mask, bool return_attns) const {
    return run(trg_seq, trg_mask, &enc_output, src_mask, return_attns, nullptr, false);
}

DecoderOutput Decoder::forward_valid_ids(const IndexArray& trg_seq, const Mask* trg_mask, Cache& cache,
                                         const Mask* src_mask, bool return_attns) const {
    return run(trg_seq, trg_mask, nullptr, src_mask, return_attns, &cache, false);
}

Decoder::Cache Decoder::start_cache(const Tensor& enc_output) const {
    Cache cache;
    for (const auto& layer : layers) cache.layers.push_back(layer->start_cache(enc_output));
    return cache;
}

Tensor Decoder::embed_target(const IndexArray& trg_seq, const std::vector<std::size_t>& start) const {
    Tensor x = trg_word_emb->forward_valid_ids(trg_seq);
    if (scale_emb) x = scale(x, float(std::sqrt(double(config.d_model))));
    if (start.size() == 1) {
        x = position_enc->forward(x, start[0]);
    } else {   // row r's positions from start[r]: the table's rows gathered, then the same addition
        const std::size_t rows = x.size(0), len = x.size(1), d = x.size(2);
        Array positions = Array::from_shape({rows, len, d});
        for (std::size_t r = 0; r < rows; ++r) {
            const Tensor rows_of_table = position_enc->table(len, start[r]);
            std::copy_n(rows_of_table.data(), len * d, positions.data() + r * len * d);
        }
        x = add(x, Tensor(std::move(positions)));
    }
    if (dropout) x = dropout->forward(x);
    if (layer_norm) x = layer_norm->forward(x);
    return x;
}

Tensor Decoder::forward_sequences(const std::vector<std::int64_t>& ids, const std::vector<Cache*>& caches,
                                  const std::vector<std::size_t>& offsets) const {
    const std::size_t rows = ids.size();
    if (offsets.size() != caches.size() + 1 || offsets.front() != 0 || offsets.back() != rows)
        throw ValueError("Decoder.forward_sequences: offsets must run from 0 to the " + std::to_string(rows) +
                         " ids, one more than the " + std::to_string(caches.size()) + " caches");
    const IndexArray trg_seq{ids, {rows, 1}};
    detail::check_token_ids(trg_seq, config.n_trg_vocab, config.n_position, "Decoder.forward_sequences", "ids");
    std::vector<std::size_t> start(rows);
    for (std::size_t s = 0; s < caches.size(); ++s) {
        if (caches[s]->layers.size() != layers.size())
            throw RuntimeError("Decoder.forward_sequences: a cache has " + std::to_string(caches[s]->layers.size()) +
                               " layers, the decoder " + std::to_string(layers.size()) + " (make it with start_cache)");
        if (offsets[s + 1] <= offsets[s]) throw ValueError("Decoder.forward_sequences: a sequence owns no row");
        std::fill(start.begin() + std::ptrdiff_t(offsets[s]), start.begin() + std::ptrdiff_t(offsets[s + 1]),
                  caches[s]->length);
    }
    Tensor x = embed_target(trg_seq, start);
    std::vector<DecoderLayer::Cache*> layer_caches(caches.size());
    for (std::size_t l = 0; l < layers.size(); ++l) {
        for (std::size_t s = 0; s < caches.size(); ++s) layer_caches[s] = &caches[s]->layers[l];
        x = layers[l]->forward_sequences(x, layer_caches, offsets);
    }
    for (Cache* c : caches) c->length += 1;
    return reshape(x, {std::int64_t(rows), std::int64_t(config.d_model)});
}

DecoderOutput Decoder::run(const IndexArray& trg_seq, const Mask* trg_mask, const Tensor* enc_output,
                           const Mask* src_mask, bool return_attns, Cache* cache, bool check_ids) const {
    if (cache && cache->layers.size() != layers.size())
        throw RuntimeError("Decoder.forward: the cache has " + std::to_string(cache->layers.size()) + " layers, the decoder " +
                           std::to_string(layers.size()) + " (make it with start_cache)");
    if (check_ids) detail::check_token_ids(trg_seq, config.n_trg_vocab, config.n_position, "Decoder.forward", "trg_seq");
    if (enc_output && (enc_output->dim() != 3 || enc_output->size(0) != trg_seq.shape[0] ||
                       enc_output->size(2) != config.d_model))
        throw ValueError("Decoder.forward: enc_output must be (batch = " + std::to_string(trg_seq.shape[0]) +
                         ", src_len, d_model = " + std::to_string(config.d_model) + "), got " +
                         shape_str(enc_output->shape()));
    DecoderOutput result;
    Tensor x = embed_target(trg_seq, {cache ? cache->length : 0});
    for (std::size_t l = 0; l < layers.size(); ++l) {
        auto [out, slf, enc] = cache ? layers[l]->forward(x, cache->layers[l], trg_mask, src_mask)
                                     : layers[l]->forward(x, *enc_output, trg_mask, src_mask);
        x = out;
        if (return_attns) {
            result.slf_attns.push_back(slf);
            result.enc_attns.push_back(enc);
        }
    }
    if (cache) cache->length += trg_seq.shape[1];
    result.output = x;
    return result;
}

}  // namespace ct::nn
