#include "ctransformer/nn/encoder.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ctransformer/error.hpp"
#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/ops/elementwise.hpp"
#include "sequence_checks.hpp"
#include "stack_helpers.hpp"

namespace ct::nn {

Encoder::Encoder(std::size_t n_src_vocab, std::size_t d_word_vec, std::size_t n_layers, std::size_t n_head,
                 std::size_t d_k, std::size_t d_v, std::size_t d_model, std::size_t d_inner, std::int64_t pad_idx,
                 float dropout, std::size_t n_position, bool scale)
    : Encoder(TransformerConfig::post_norm(n_src_vocab, n_src_vocab, pad_idx, pad_idx, d_word_vec, d_model, d_inner,
                                          n_layers, n_head, d_k, d_v, dropout, n_position),
              scale) {}

Encoder::Encoder(const TransformerConfig& c, bool scale) : config(c), scale_emb(scale) {
    TransformerConfig check = c;
    check.emb_src_trg_weight_sharing = false;   // the encoder alone shares nothing
    check.validate();
    src_word_emb = detail::make_word_embedding(c, c.n_src_vocab, c.src_pad_idx);
    position_enc = std::make_shared<PositionalEncoding>(c.d_word_vec, c.n_position, c.pe_formula, c.layout);
    if (c.embed_dropout) dropout = std::make_shared<Dropout>(c.dropout);
    detail::check_layers_fit("Encoder: the weights of n_layers=" + std::to_string(c.n_layers) + " layers", c.n_layers,
                             detail::attention_floats(c.d_model, c.n_head, c.d_k, c.d_v) +
                                 detail::feed_forward_floats(c.d_model, c.d_inner));
    const SublayerOptions o = c.sublayer_options();
    for (std::size_t i = 0; i < c.n_layers; ++i)
        layers.push_back(std::make_shared<EncoderLayer>(c.d_model, c.d_inner, c.n_head, c.d_k, c.d_v, c.dropout, o));
    if (c.embed_layer_norm) layer_norm = std::make_shared<LayerNorm>(c.d_model, c.layer_norm_eps);

    if (c.layout == Layout::Marian) {   // MarianEncoder: embed_tokens, embed_positions, layers
        register_module("embed_tokens", src_word_emb);
        register_module("embed_positions", position_enc);
        if (dropout) register_module("dropout", dropout);
        auto stack = std::make_shared<ModuleList<EncoderLayer>>();
        for (auto& l : layers) stack->append(l);
        register_module("layers", stack);
        if (layer_norm) register_module("layer_norm", layer_norm);
    } else if (c.layout == Layout::PostNorm) {   // Models.py's registration order
        register_module("src_word_emb", src_word_emb);
        register_module("position_enc", position_enc);
        if (dropout) register_module("dropout", dropout);
        auto stack = std::make_shared<ModuleList<EncoderLayer>>();
        for (auto& l : layers) stack->append(l);
        register_module("layer_stack", stack);
        if (layer_norm) register_module("layer_norm", layer_norm);
    } else {   // pre-norm layout: the embedding lives in the model's embed_x; the encoder holds the layers
        embed = std::make_shared<PositionEmbedding>(src_word_emb, position_enc);
        if (dropout) register_module("dropout", dropout);
        for (std::size_t i = 0; i < layers.size(); ++i)
            register_module(detail::pre_norm_layer_name(i, true), layers[i]);
        if (layer_norm) register_module("layer_norm", layer_norm);
    }
}

namespace {

// The rows of (b x len) whose outputs are read when src_mask (b or 1, 1, len) hides its zero positions from every
// query and nothing else reads them; empty when every row is read (nothing to skip) or the mask is of another
// shape. A sentence whose positions are all hidden attends to all of them alike (a softmax of equal scores),
// so its rows are all read.
std::vector<std::size_t> read_rows_of(const Mask* mask, std::size_t b, std::size_t len) {
    std::vector<std::size_t> rows;
    if (!mask || mask->shape.size() != 3 || mask->shape[1] != 1 || mask->shape[2] != len ||
        (mask->shape[0] != 1 && mask->shape[0] != b))
        return rows;
    for (std::size_t s = 0; s < b; ++s) {
        const std::uint8_t* m = mask->data.data() + (mask->shape[0] == 1 ? 0 : s * len);
        const bool any = std::any_of(m, m + len, [](std::uint8_t v) { return v != 0; });
        for (std::size_t j = 0; j < len; ++j)
            if (m[j] || !any) rows.push_back(s * len + j);
    }
    if (rows.size() == b * len) rows.clear();
    return rows;
}

}  // namespace

EncoderOutput Encoder::forward(const IndexArray& src_seq, const Mask* src_mask, bool return_attns,
                               bool masked_rows_unread) const {
    detail::check_token_ids(src_seq, config.n_src_vocab, config.n_position, "Encoder.forward", "src_seq");
    return forward_valid_ids(src_seq, src_mask, return_attns, masked_rows_unread);
}

EncoderOutput Encoder::forward_valid_ids(const IndexArray& src_seq, const Mask* src_mask, bool return_attns,
                                         bool masked_rows_unread) const {
    EncoderOutput result;
    Tensor x = src_word_emb->forward_valid_ids(src_seq);
    if (scale_emb) x = scale(x, float(std::sqrt(double(config.d_model))));   // enc_output *= d_model ** 0.5
    x = position_enc->forward(x);
    if (dropout) x = dropout->forward(x);
    if (layer_norm) x = layer_norm->forward(x);
    const std::vector<std::size_t> read =
        masked_rows_unread && !grad_enabled() ? read_rows_of(src_mask, x.size(0), x.size(1)) : std::vector<std::size_t>{};
    for (const auto& layer : layers) {
        auto [out, attn] = layer->forward(x, src_mask, read.empty() ? nullptr : &read);
        x = out;
        if (return_attns) result.slf_attns.push_back(attn);
    }
    result.output = x;
    return result;
}

}  // namespace ct::nn
