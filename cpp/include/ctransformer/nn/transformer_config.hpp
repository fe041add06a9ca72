// The options that let one set of encoder-decoder classes build both variants of the model: the paper's
// post-norm Transformer (jadore801120's code; the defaults) and the small pre-norm
// Transformer of the toy translation task (TransformerConfig::small_pre_norm()). Each option
// names the detail it stands for; docs/DESIGN.md's glossary gives their sources.
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "ctransformer/nn/activation.hpp"

namespace ct::nn {

// Which variant's module tree (and so parameter names) the model carries, so state dicts move to and
// from that variant's torch model unchanged.
//   PostNorm ('post_norm'; jadore801120's reference): encoder.src_word_emb, encoder.position_enc.pos_table,
//            encoder.layer_stack.0.slf_attn.w_qs, ... pos_ffn.w_1, encoder.layer_norm,
//            decoder.layer_stack.0.enc_attn, trg_word_prj.
//   PreNorm  ('pre_norm'; the small pre-norm model, one LayerNorm shared by q, k and v): embed_x.pe, embed_x.embed,
//            encoder.layer_l.mh.fc_Q, ... .fc.fc.0, .fc.norm, decoder.layer_1.mhl / mh2, fc_out (the
//            reference's spelling, "layer_l" included).
//   Marian   ('marian'; Hugging Face's MarianMTModel, the opus-mt translators): final_logits_bias,
//            model.shared, model.encoder.embed_tokens, model.encoder.embed_positions.weight,
//            model.encoder.layers.0.self_attn.q_proj, ... self_attn_layer_norm, fc1, fc2, final_layer_norm,
//            model.decoder.layers.0.encoder_attn / encoder_attn_layer_norm, lm_head. The attention's and the
//            feed-forward's LayerNorms and Linears are named in the layer, as Hugging Face's.
// Seed000 and Seed003 are the older names, kept as aliases.
enum class Layout { PostNorm, PreNorm, Marian, Seed000 = PostNorm, Seed003 = PreNorm };

// The angle of feature j (of d) at position pos; both references take sin on even j, cos on odd j.
//   Paired   (the post-norm Transformer, the paper): pos / 10000^(2*(j//2)/d)
//   PerIndex (the small pre-norm model):             pos / 10000^(j/d)
//   Halves   (Marian): the Paired angles, all the sines (even j) in the first half of the features, then all the
//            cosines (odd j) in the second, not interleaved
enum class PositionalFormula { Paired, PerIndex, Halves };


// Every default of the Transformer lives here once: the struct's fields, the post_norm()/small_pre_norm()
// factories, the seed-style constructor and the Python bindings (and so the type stubs) all read these. Floats are doubles
// here so the bindings show 0.1, not float(0.1)'s 0.10000000149.
namespace defaults {
// The post-norm reference's Transformer(...) arguments (the paper's base model).
inline constexpr std::size_t d_word_vec = 512, d_model = 512, d_inner = 2048, n_layers = 6, n_head = 8, d_k = 64,
                             d_v = 64, n_position = 200;
inline constexpr double dropout = 0.1;
inline constexpr bool trg_emb_prj_weight_sharing = true, emb_src_trg_weight_sharing = true;
inline constexpr const char* scale_emb_or_prj = "prj";
// The sub-layer options (SublayerOptions): the post-norm model's.
inline constexpr bool norm_first = false, qkv_bias = false, proj_bias = false, scale_after_matmul = false;
inline constexpr double layer_norm_eps = 1e-6, attn_dropout = 0.1, mask_fill = -1e9;
// The small pre-norm model of the toy translation task (TransformerConfig::small_pre_norm()).
namespace small_pre_norm {
inline constexpr std::size_t vocab = 39, d_model = 32, n_head = 4, d_inner = 64, n_layers = 3, n_position = 50;
inline constexpr std::int64_t pad_idx = 2;
inline constexpr double dropout = 0.1;
}  // namespace small_pre_norm
namespace seed003 = small_pre_norm;   // the older name
}  // namespace defaults

// How each attention and feed-forward sub-layer is built (its defaults: the post-norm model's).
struct SublayerOptions {
    Layout layout = Layout::PostNorm;
    // false: post-norm, LayerNorm(x + dropout(sublayer(x))) (the post-norm Transformer).
    // true: pre-norm, x + dropout(sublayer(LN(x))), where attention applies ONE LayerNorm to each of
    // its q, k and v inputs and the residual is the un-normalised query (the pre-norm model).
    bool norm_first = defaults::norm_first;
    bool qkv_bias = defaults::qkv_bias;     // bias on w_qs/w_ks/w_vs (the pre-norm model: yes)
    bool proj_bias = defaults::proj_bias;   // bias on the attention's output projection fc (the pre-norm model: yes)
    float layer_norm_eps = float(defaults::layer_norm_eps);   // post-norm: 1e-6; pre-norm: torch's default 1e-5
    // The post-norm reference's MultiHeadAttention builds ScaledDotProductAttention(temperature) with its default
    // attn_dropout = 0.1 whatever `dropout` is; the pre-norm model has no attention dropout.
    float attn_dropout = float(defaults::attn_dropout);
    float mask_fill = float(defaults::mask_fill);   // score where the mask forbids attending (pre-norm: -inf)
    // false: (q / temperature) @ k^T (post-norm); true: (q @ k^T) / temperature (pre-norm).
    bool scale_after_matmul = defaults::scale_after_matmul;
    Activation activation = Activation::ReLU;   // the feed-forward's: w_2(activation(w_1(x)))
    float activation_dropout = 0.0f;            // dropout on the activation's output (Marian's activation_dropout)
};

// The whole model: the sub-layer options (inherited, so they are declared and defaulted once), then
// the sizes and the embedding front and output.
struct TransformerConfig : SublayerOptions {
    // The post-norm reference's Transformer(...) arguments.
    std::size_t n_src_vocab = 0, n_trg_vocab = 0;
    std::int64_t src_pad_idx = 0, trg_pad_idx = 0;
    std::size_t d_word_vec = defaults::d_word_vec, d_model = defaults::d_model, d_inner = defaults::d_inner,
                n_layers = defaults::n_layers, n_head = defaults::n_head, d_k = defaults::d_k, d_v = defaults::d_v;
    float dropout = float(defaults::dropout);
    std::size_t n_position = defaults::n_position;
    bool trg_emb_prj_weight_sharing = defaults::trg_emb_prj_weight_sharing,
         emb_src_trg_weight_sharing = defaults::emb_src_trg_weight_sharing;
    std::string scale_emb_or_prj = defaults::scale_emb_or_prj;  // 'emb', 'prj' or 'none' (only with trg_emb_prj_weight_sharing)

    // One side's own sizes, where it differs from the other (MarianConfig's encoder_layers / decoder_layers,
    // encoder_attention_heads / decoder_attention_heads, encoder_ffn_dim / decoder_ffn_dim): the distilled opus-mt
    // students are 6 encoder layers and 2 decoder ones. Unset, a side takes the shorthand above (n_layers, n_head,
    // d_k, d_v, d_inner), so the seed models and every symmetric model set none of them. The decoder's heads serve
    // its self-attention and its attention over the source alike, as Marian's do.
    std::optional<std::size_t> encoder_n_layers, encoder_n_head, encoder_d_k, encoder_d_v, encoder_d_inner;
    std::optional<std::size_t> decoder_n_layers, decoder_n_head, decoder_d_k, decoder_d_v, decoder_d_inner;

    // The embedding front and the output.
    PositionalFormula pe_formula = PositionalFormula::Paired;
    bool embed_dropout = true;            // post-norm model: dropout(emb + PE); pre-norm: none
    bool embed_layer_norm = true;         // post-norm model: LayerNorm(eps) right after it (encoder.layer_norm)
    bool embedding_padding_idx = true;    // post-norm model: Embedding(..., padding_idx=pad), no gradient to that row
    bool xavier_init = true;              // post-norm model: xavier_uniform_ on every parameter of rank > 1
    std::optional<float> embedding_init_std;  // N(0, std) for the embeddings (pre-norm: 0.1); unset: torch's default
    bool output_bias = false;             // the pre-norm model's fc_out = Linear(32, 39) has a bias
    bool flatten_logits = true;           // the post-norm model returns (b*len, V); the pre-norm one (b, len, V)
    // Marian's final_logits_bias: a (1, n_trg_vocab) BUFFER added to the logits, loaded but never trained.
    bool logits_bias = false;
    // The target pad mask: the post-norm reference hides target pads from the decoder's self-attention; Marian
    // starts the decoder on the pad id itself and hides nothing but the future.
    bool trg_pad_mask = true;
    // The decoder's first input token when decoding; unset: the caller's (bos). Marian: the pad id.
    std::optional<std::int64_t> decoder_start_idx;

    const SublayerOptions& sublayer_options() const { return *this; }
    // This configuration with the shorthand sizes set to one side's and no per-side values: what that side's stack
    // (Encoder, Decoder) is built from and keeps as its own config.
    TransformerConfig encoder_side() const;
    TransformerConfig decoder_side() const;
    bool symmetric() const;   // both sides have the same layers, heads, head sizes and FFN width
    bool scale_emb() const;   // as the seed: only when the projection shares the target embedding
    bool scale_prj() const;
    // Throws ValueError for inconsistent settings (the seed's asserts, and a few it leaves implicit).
    void validate() const;

    // The post-norm model from jadore801120's Transformer(...) arguments, in its order; every other option
    // keeps its default.
    static TransformerConfig post_norm(std::size_t n_src_vocab, std::size_t n_trg_vocab, std::int64_t src_pad_idx,
                                       std::int64_t trg_pad_idx, std::size_t d_word_vec = defaults::d_word_vec,
                                       std::size_t d_model = defaults::d_model, std::size_t d_inner = defaults::d_inner,
                                       std::size_t n_layers = defaults::n_layers, std::size_t n_head = defaults::n_head,
                                       std::size_t d_k = defaults::d_k, std::size_t d_v = defaults::d_v,
                                       float dropout = float(defaults::dropout),
                                       std::size_t n_position = defaults::n_position,
                                       bool trg_emb_prj_weight_sharing = defaults::trg_emb_prj_weight_sharing,
                                       bool emb_src_trg_weight_sharing = defaults::emb_src_trg_weight_sharing,
                                       const std::string& scale_emb_or_prj = defaults::scale_emb_or_prj);

    // The small pre-norm model of the toy translation task: one LayerNorm shared by q, k, v,
    // biased projections, 4 heads of 8 over d_model 32, FFN 32 -> 64 -> 32, 3 + 3 layers, vocabulary 39
    // with <PAD> = 2, sequences up to 50, no weight sharing or scaling.
    static TransformerConfig small_pre_norm(std::size_t n_src_vocab = defaults::small_pre_norm::vocab,
                                            std::size_t n_trg_vocab = defaults::small_pre_norm::vocab,
                                            std::int64_t pad_idx = defaults::small_pre_norm::pad_idx,
                                            std::size_t d_model = defaults::small_pre_norm::d_model,
                                            std::size_t n_head = defaults::small_pre_norm::n_head,
                                            std::size_t d_inner = defaults::small_pre_norm::d_inner,
                                            std::size_t n_layers = defaults::small_pre_norm::n_layers,
                                            std::size_t n_position = defaults::small_pre_norm::n_position,
                                            float dropout = float(defaults::small_pre_norm::dropout));

    // Hugging Face's MarianMTModel (config.json's names in brackets): post-norm layers with biased q/k/v/out
    // projections, LayerNorm eps 1e-5, no embedding LayerNorm, the embeddings times sqrt(d_model) when
    // scale_embedding, the sinusoids in halves and not stored, final_logits_bias, the pad id as decoder start,
    // and no target pad mask. vocab (vocab_size), trg_vocab (decoder_vocab_size), d_model, d_inner
    // (encoder_ffn_dim = decoder_ffn_dim), n_layers (encoder_layers = decoder_layers), n_head, n_position
    // (max_position_embeddings), pad_idx (pad_token_id), share (share_encoder_decoder_embeddings), tie
    // (tie_word_embeddings), activation (activation_function).
    static TransformerConfig marian(std::size_t vocab, std::size_t trg_vocab, std::size_t d_model, std::size_t d_inner,
                                    std::size_t n_layers, std::size_t n_head, std::size_t n_position, std::int64_t pad_idx,
                                    bool share, bool tie, Activation activation, bool scale_embedding, float dropout,
                                    float attention_dropout, float activation_dropout);

    // The older names of the two factories, kept as aliases.
    template <class... Args>
    static TransformerConfig seed000(Args&&... args) { return post_norm(std::forward<Args>(args)...); }
    template <class... Args>
    static TransformerConfig seed003(Args&&... args) { return small_pre_norm(std::forward<Args>(args)...); }
};

Layout parse_layout(const std::string& s, const char* fn);
std::string layout_name(Layout l);
PositionalFormula parse_positional_formula(const std::string& s, const char* fn);
std::string positional_formula_name(PositionalFormula f);

}  // namespace ct::nn
