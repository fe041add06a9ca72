#include "ctransformer/nn/transformer.hpp"

#include <cmath>

#include "ctransformer/error.hpp"
#include "ctransformer/nn/masks.hpp"
#include "ctransformer/ops/elementwise.hpp"
#include "ctransformer/ops/linear.hpp"
#include "ctransformer/ops/shape.hpp"
#include "ctransformer/runtime/random.hpp"
#include "sequence_checks.hpp"

namespace ct::nn {

namespace {

const TransformerConfig& validated(const TransformerConfig& c) {
    c.validate();
    return c;
}

}  // namespace

Transformer::Transformer(std::size_t n_src_vocab, std::size_t n_trg_vocab, std::int64_t src_pad_idx,
                         std::int64_t trg_pad_idx, std::size_t d_word_vec, std::size_t d_model, std::size_t d_inner,
                         std::size_t n_layers, std::size_t n_head, std::size_t d_k, std::size_t d_v, float dropout,
                         std::size_t n_position, bool trg_emb_prj_weight_sharing, bool emb_src_trg_weight_sharing,
                         const std::string& scale_emb_or_prj)
    : Transformer(TransformerConfig::post_norm(n_src_vocab, n_trg_vocab, src_pad_idx, trg_pad_idx, d_word_vec, d_model, d_inner,
                                 n_layers, n_head, d_k, d_v, dropout, n_position, trg_emb_prj_weight_sharing,
                                 emb_src_trg_weight_sharing, scale_emb_or_prj)) {}

Transformer::Transformer(const TransformerConfig& c) : config(validated(c)) {
    encoder = std::make_shared<Encoder>(c.encoder_side(), c.scale_emb());
    decoder = std::make_shared<Decoder>(c.decoder_side(), c.scale_emb());
    trg_word_prj = std::make_shared<Linear>(c.d_model, c.n_trg_vocab, c.output_bias);
    if (c.logits_bias) {
        final_logits_bias = Tensor(Array(xt::zeros<float>(std::vector<std::size_t>{1, c.n_trg_vocab})));
        register_buffer("final_logits_bias", &final_logits_bias);   // loaded, never trained
    }
    if (c.layout == Layout::Marian) {   // MarianMTModel: final_logits_bias, model.{shared,encoder,decoder}, lm_head
        auto model = std::make_shared<MarianModel>();
        if (c.emb_src_trg_weight_sharing) model->add("shared", decoder->trg_word_emb);
        model->add("encoder", encoder);
        model->add("decoder", decoder);
        register_module("model", model);
        register_module("lm_head", trg_word_prj);
    } else if (c.layout == Layout::PostNorm) {
        register_module("encoder", encoder);
        register_module("decoder", decoder);
        register_module("trg_word_prj", trg_word_prj);
    } else {   // the small pre-norm model: embed_x, embed_y, encoder, decoder, fc_out
        register_module("embed_x", encoder->embed);
        register_module("embed_y", decoder->embed);
        register_module("encoder", encoder);
        register_module("decoder", decoder);
        register_module("fc_out", trg_word_prj);
    }

    // The post-norm reference: `for p in self.parameters(): if p.dim() > 1: nn.init.xavier_uniform_(p)`, before tying.
    if (c.xavier_init)
        for (Tensor& p : parameters())
            if (p.dim() > 1) xavier_uniform_(p);

    // Tying is assignment of the handle: both names then hold one tensor (and one gradient).
    if (c.trg_emb_prj_weight_sharing) trg_word_prj->weight = decoder->trg_word_emb->weight;
    if (c.emb_src_trg_weight_sharing) encoder->src_word_emb->weight = decoder->trg_word_emb->weight;
}

EncoderOutput Transformer::encode(const IndexArray& src_seq, const Mask* src_mask, bool return_attns,
                                  bool masked_rows_unread) const {
    detail::check_token_ids(src_seq, config.n_src_vocab, config.n_position, "Transformer.encode", "src_seq");
    return encoder->forward_valid_ids(src_seq, src_mask, return_attns, masked_rows_unread);
}

DecoderOutput Transformer::decode(const IndexArray& trg_seq, const Mask* trg_mask, const Tensor& enc_output,
                                  const Mask* src_mask, bool return_attns) const {
    detail::check_token_ids(trg_seq, config.n_trg_vocab, config.n_position, "Transformer.decode", "trg_seq");
    return decoder->forward_valid_ids(trg_seq, trg_mask, enc_output, src_mask, return_attns);
}

Tensor Transformer::project(const Tensor& dec_output) const {
    if (dec_output.dim() < 1 || dec_output.size(-1) != config.d_model)
        throw ValueError("Transformer.project: dec_output must end in d_model = " + std::to_string(config.d_model) +
                         ", got " + shape_str(dec_output.shape()));
    // logits * d_model ** -0.5 when scale_prj, the scale folded into the product (ops/linear.hpp)
    Tensor logits = config.scale_prj() ? trg_word_prj->forward(dec_output, float(std::pow(double(config.d_model), -0.5)))
                                       : trg_word_prj->forward(dec_output);
    if (!config.logits_bias) return logits;
    return add(logits, final_logits_bias.detach());   // lm_head(x) + final_logits_bias, broadcast over the rows
}

TransformerOutput Transformer::forward(const IndexArray& src_seq, const IndexArray& trg_seq, bool return_attns) const {
    detail::check_token_ids(src_seq, config.n_src_vocab, config.n_position, "Transformer.forward", "src_seq");
    detail::check_token_ids(trg_seq, config.n_trg_vocab, config.n_position, "Transformer.forward", "trg_seq");
    if (src_seq.shape[0] != trg_seq.shape[0])
        throw ValueError("Transformer.forward: src_seq and trg_seq must have the same batch size, got " +
                         std::to_string(src_seq.shape[0]) + " and " + std::to_string(trg_seq.shape[0]));
    const Mask src_mask = get_pad_mask(src_seq, config.src_pad_idx);
    const Mask trg_mask = config.trg_pad_mask
                              ? mask_and(get_pad_mask(trg_seq, config.trg_pad_idx), get_subsequent_mask(trg_seq))
                              : get_subsequent_mask(trg_seq);

    // The ids were checked above, once: the encoder, decoder and embeddings below do not scan them again.
    EncoderOutput enc = encoder->forward_valid_ids(src_seq, &src_mask, return_attns);
    DecoderOutput dec = decoder->forward_valid_ids(trg_seq, &trg_mask, enc.output, &src_mask, return_attns);
    TransformerOutput out;
    // Flattened before the projection, the same rows: a copy of (b*lt, d_model) instead of the
    // logits' (b*lt, n_trg_vocab).
    out.logits = config.flatten_logits ? project(reshape(dec.output, {-1, std::int64_t(config.d_model)}))
                                       : project(dec.output);
    out.enc_slf_attns = std::move(enc.slf_attns);
    out.dec_slf_attns = std::move(dec.slf_attns);
    out.dec_enc_attns = std::move(dec.enc_attns);
    return out;
}

}  // namespace ct::nn
