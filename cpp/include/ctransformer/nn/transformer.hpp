// Transformer (jadore801120's Models.py): the encoder-decoder model, post-norm by default, and the small
// pre-norm model of the toy translation task through TransformerConfig::small_pre_norm().
//
// The post-norm reference's construction, step by step: build every module with torch's default init, then
// xavier_uniform_ every parameter of rank > 1 in parameters() order, then tie by assignment
// (trg_word_prj.weight = decoder.trg_word_emb.weight; encoder.src_word_emb.weight = the same), so
// the shared weight is ONE tensor with one gradient, listed once by parameters() and under every
// name by state_dict().
#pragma once
#include <memory>
#include <vector>

#include "ctransformer/nn/decoder.hpp"
#include "ctransformer/nn/encoder.hpp"
#include "ctransformer/nn/linear.hpp"

namespace ct::nn {

struct TransformerOutput {
    Tensor logits;   // (b*lt, n_trg_vocab), or (b, lt, n_trg_vocab) without flatten_logits
    std::vector<Tensor> enc_slf_attns, dec_slf_attns, dec_enc_attns;   // when asked for
};

class Transformer : public Module {
public:
    explicit Transformer(const TransformerConfig& config);
    // The seed's signature (defaults: TransformerConfig's, nn/transformer_config.hpp).
    Transformer(std::size_t n_src_vocab, std::size_t n_trg_vocab, std::int64_t src_pad_idx, std::int64_t trg_pad_idx,
                std::size_t d_word_vec = defaults::d_word_vec, std::size_t d_model = defaults::d_model,
                std::size_t d_inner = defaults::d_inner, std::size_t n_layers = defaults::n_layers,
                std::size_t n_head = defaults::n_head, std::size_t d_k = defaults::d_k, std::size_t d_v = defaults::d_v,
                float dropout = float(defaults::dropout), std::size_t n_position = defaults::n_position,
                bool trg_emb_prj_weight_sharing = defaults::trg_emb_prj_weight_sharing,
                bool emb_src_trg_weight_sharing = defaults::emb_src_trg_weight_sharing,
                const std::string& scale_emb_or_prj = defaults::scale_emb_or_prj);

    // src_seq (b, ls) and trg_seq (b, lt) token ids. The masks are built as the seed:
    // src pad mask, and target pad mask AND the no-peek mask.
    TransformerOutput forward(const IndexArray& src_seq, const IndexArray& trg_seq, bool return_attns = false) const;
    // The halves, for decoding step by step.
    // masked_rows_unread: as Encoder::forward's (decoding reads no row its source mask hides).
    EncoderOutput encode(const IndexArray& src_seq, const Mask* src_mask, bool return_attns = false,
                         bool masked_rows_unread = false) const;
    DecoderOutput decode(const IndexArray& trg_seq, const Mask* trg_mask, const Tensor& enc_output,
                         const Mask* src_mask, bool return_attns = false) const;
    // dec_output (b, lt, d_model) -> logits (b, lt, n_trg_vocab), times d_model^-0.5 when scale_prj.
    Tensor project(const Tensor& dec_output) const;
    std::string type_name() const override { return "Transformer"; }

    const TransformerConfig config;
    std::shared_ptr<Encoder> encoder;
    std::shared_ptr<Decoder> decoder;
    std::shared_ptr<Linear> trg_word_prj;   // the pre-norm model's fc_out, Marian's lm_head
    Tensor final_logits_bias;               // (1, n_trg_vocab) when config.logits_bias: a buffer added to the logits

private:
    // Marian's `model`: a container of the shared embedding, the encoder and the decoder.
    struct MarianModel : Module {
        void add(const std::string& name, std::shared_ptr<Module> m) { register_module(name, std::move(m)); }
        std::string type_name() const override { return "MarianModel"; }
    };
};

}  // namespace ct::nn
