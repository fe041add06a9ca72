#include "ctransformer/nn/transformer_config.hpp"

#include "ctransformer/error.hpp"

namespace ct::nn {

// The post-norm reference: scale_emb = (scale_emb_or_prj == 'emb') if trg_emb_prj_weight_sharing else False,
// same for prj. Marian scales its embeddings whether or not the output is tied (scale_embedding).
bool TransformerConfig::scale_emb() const {
    return (trg_emb_prj_weight_sharing || layout == Layout::Marian) && scale_emb_or_prj == "emb";
}
bool TransformerConfig::scale_prj() const { return trg_emb_prj_weight_sharing && scale_emb_or_prj == "prj"; }

namespace {

TransformerConfig one_side(const TransformerConfig& c, const std::optional<std::size_t>& n_layers,
                           const std::optional<std::size_t>& n_head, const std::optional<std::size_t>& d_k,
                           const std::optional<std::size_t>& d_v, const std::optional<std::size_t>& d_inner) {
    TransformerConfig side = c;
    side.n_layers = n_layers.value_or(c.n_layers);
    side.n_head = n_head.value_or(c.n_head);
    side.d_k = d_k.value_or(c.d_k);
    side.d_v = d_v.value_or(c.d_v);
    side.d_inner = d_inner.value_or(c.d_inner);
    for (auto* f : {&side.encoder_n_layers, &side.encoder_n_head, &side.encoder_d_k, &side.encoder_d_v,
                    &side.encoder_d_inner, &side.decoder_n_layers, &side.decoder_n_head, &side.decoder_d_k,
                    &side.decoder_d_v, &side.decoder_d_inner})
        f->reset();
    return side;
}

}  // namespace

TransformerConfig TransformerConfig::encoder_side() const {
    return one_side(*this, encoder_n_layers, encoder_n_head, encoder_d_k, encoder_d_v, encoder_d_inner);
}

TransformerConfig TransformerConfig::decoder_side() const {
    return one_side(*this, decoder_n_layers, decoder_n_head, decoder_d_k, decoder_d_v, decoder_d_inner);
}

bool TransformerConfig::symmetric() const {
    const TransformerConfig e = encoder_side(), d = decoder_side();
    return e.n_layers == d.n_layers && e.n_head == d.n_head && e.d_k == d.d_k && e.d_v == d.d_v &&
           e.d_inner == d.d_inner;
}

void TransformerConfig::validate() const {
    const std::string fn = "Transformer: ";
    auto positive = [&](std::size_t v, const char* name) {
        if (v == 0) throw ValueError(fn + name + " must be positive, got 0");
    };
    positive(n_src_vocab, "n_src_vocab");
    positive(n_trg_vocab, "n_trg_vocab");
    positive(d_word_vec, "d_word_vec");
    positive(d_model, "d_model");
    positive(d_inner, "d_inner");
    positive(n_head, "n_head");
    positive(d_k, "d_k");
    positive(d_v, "d_v");
    positive(n_position, "n_position");
    // A side's layers may be 0, as n_layers may; its other sizes, like the shorthand's, may not.
    for (const auto& [value, name] : {std::pair{&encoder_n_head, "encoder_n_head"}, {&encoder_d_k, "encoder_d_k"},
                                      {&encoder_d_v, "encoder_d_v"}, {&encoder_d_inner, "encoder_d_inner"},
                                      {&decoder_n_head, "decoder_n_head"}, {&decoder_d_k, "decoder_d_k"},
                                      {&decoder_d_v, "decoder_d_v"}, {&decoder_d_inner, "decoder_d_inner"}})
        if (value->has_value()) positive(**value, name);
    if (scale_emb_or_prj != "emb" && scale_emb_or_prj != "prj" && scale_emb_or_prj != "none")
        throw ValueError(fn + "scale_emb_or_prj must be 'emb', 'prj' or 'none', got '" + scale_emb_or_prj + "'");
    if (d_model != d_word_vec)  // the seed's assert
        throw ValueError(fn + "d_model (" + std::to_string(d_model) + ") must equal d_word_vec (" +
                         std::to_string(d_word_vec) + "): the residual connections add them");
    if (emb_src_trg_weight_sharing && n_src_vocab != n_trg_vocab)
        throw ValueError(fn + "emb_src_trg_weight_sharing needs n_src_vocab == n_trg_vocab, got " +
                         std::to_string(n_src_vocab) + " and " + std::to_string(n_trg_vocab));
    if (src_pad_idx < 0 || src_pad_idx >= std::int64_t(n_src_vocab))
        throw ValueError(fn + "src_pad_idx = " + std::to_string(src_pad_idx) + " is outside the source vocabulary [0, " +
                         std::to_string(n_src_vocab) + ")");
    if (trg_pad_idx < 0 || trg_pad_idx >= std::int64_t(n_trg_vocab))
        throw ValueError(fn + "trg_pad_idx = " + std::to_string(trg_pad_idx) + " is outside the target vocabulary [0, " +
                         std::to_string(n_trg_vocab) + ")");
    if (!(dropout >= 0.0f && dropout <= 1.0f))
        throw ValueError(fn + "dropout must be a probability in [0, 1], got " + std::to_string(dropout));
    if (!(attn_dropout >= 0.0f && attn_dropout <= 1.0f))
        throw ValueError(fn + "attn_dropout must be a probability in [0, 1], got " + std::to_string(attn_dropout));
    if (!(activation_dropout >= 0.0f && activation_dropout <= 1.0f))
        throw ValueError(fn + "activation_dropout must be a probability in [0, 1], got " + std::to_string(activation_dropout));
    if (!(layer_norm_eps > 0.0f)) throw ValueError(fn + "layer_norm_eps must be positive");
    if (decoder_start_idx && (*decoder_start_idx < 0 || *decoder_start_idx >= std::int64_t(n_trg_vocab)))
        throw ValueError(fn + "decoder_start_idx = " + std::to_string(*decoder_start_idx) +
                         " is outside the target vocabulary [0, " + std::to_string(n_trg_vocab) + ")");
    if (layout == Layout::Marian && (norm_first || d_model != n_head * d_k || d_model != n_head * d_v))
        throw ValueError(fn + "the Marian layout is post-norm with d_k = d_v = d_model / n_head");
    if (embedding_init_std && !(*embedding_init_std >= 0.0f))
        throw ValueError(fn + "embedding_init_std must be >= 0, got " + std::to_string(*embedding_init_std));
}

TransformerConfig TransformerConfig::post_norm(std::size_t n_src_vocab, std::size_t n_trg_vocab,
                                               std::int64_t src_pad_idx, std::int64_t trg_pad_idx,
                                               std::size_t d_word_vec, std::size_t d_model, std::size_t d_inner,
                                               std::size_t n_layers, std::size_t n_head, std::size_t d_k, std::size_t d_v,
                                               float dropout, std::size_t n_position, bool trg_emb_prj_weight_sharing,
                                               bool emb_src_trg_weight_sharing, const std::string& scale_emb_or_prj) {
    TransformerConfig c;
    c.n_src_vocab = n_src_vocab;
    c.n_trg_vocab = n_trg_vocab;
    c.src_pad_idx = src_pad_idx;
    c.trg_pad_idx = trg_pad_idx;
    c.d_word_vec = d_word_vec;
    c.d_model = d_model;
    c.d_inner = d_inner;
    c.n_layers = n_layers;
    c.n_head = n_head;
    c.d_k = d_k;
    c.d_v = d_v;
    c.dropout = dropout;
    c.n_position = n_position;
    c.trg_emb_prj_weight_sharing = trg_emb_prj_weight_sharing;
    c.emb_src_trg_weight_sharing = emb_src_trg_weight_sharing;
    c.scale_emb_or_prj = scale_emb_or_prj;
    return c;
}

namespace {

// The sizes both factories set alike: one pad id for both sides, d_word_vec = d_model, heads of d_model / n_head.
TransformerConfig sized(const char* fn, std::size_t n_src_vocab, std::size_t n_trg_vocab, std::int64_t pad_idx,
                        std::size_t d_model, std::size_t n_head, std::size_t d_inner, std::size_t n_layers,
                        std::size_t n_position, float dropout) {
    if (n_head == 0 || d_model % n_head != 0)
        throw ValueError(std::string(fn) + ": d_model (" + std::to_string(d_model) + ") must be a multiple of n_head (" +
                         std::to_string(n_head) + ")");
    TransformerConfig c;
    c.n_src_vocab = n_src_vocab;
    c.n_trg_vocab = n_trg_vocab;
    c.src_pad_idx = c.trg_pad_idx = pad_idx;
    c.d_word_vec = c.d_model = d_model;
    c.d_inner = d_inner;
    c.n_layers = n_layers;
    c.n_head = n_head;
    c.d_k = c.d_v = d_model / n_head;
    c.dropout = dropout;
    c.n_position = n_position;
    return c;
}

}  // namespace

TransformerConfig TransformerConfig::small_pre_norm(std::size_t n_src_vocab, std::size_t n_trg_vocab, std::int64_t pad_idx,
                                                    std::size_t d_model, std::size_t n_head, std::size_t d_inner,
                                                    std::size_t n_layers, std::size_t n_position, float dropout) {
    TransformerConfig c = sized("TransformerConfig.small_pre_norm", n_src_vocab, n_trg_vocab, pad_idx, d_model, n_head,
                                d_inner, n_layers, n_position, dropout);
    c.trg_emb_prj_weight_sharing = c.emb_src_trg_weight_sharing = false;
    c.scale_emb_or_prj = "none";
    c.layout = Layout::PreNorm;
    c.norm_first = true;
    c.qkv_bias = c.proj_bias = true;
    c.layer_norm_eps = 1e-5f;
    c.attn_dropout = 0.0f;
    c.mask_fill = -std::numeric_limits<float>::infinity();
    c.scale_after_matmul = true;
    c.pe_formula = PositionalFormula::PerIndex;
    c.embed_dropout = false;
    c.embed_layer_norm = false;
    c.embedding_padding_idx = false;
    c.xavier_init = false;
    c.embedding_init_std = 0.1f;
    c.output_bias = true;
    c.flatten_logits = false;
    return c;
}

TransformerConfig TransformerConfig::marian(std::size_t vocab, std::size_t trg_vocab, std::size_t d_model,
                                            std::size_t d_inner, std::size_t n_layers, std::size_t n_head,
                                            std::size_t n_position, std::int64_t pad_idx, bool share, bool tie,
                                            Activation activation, bool scale_embedding, float dropout,
                                            float attention_dropout, float activation_dropout) {
    TransformerConfig c = sized("TransformerConfig.marian", vocab, trg_vocab, pad_idx, d_model, n_head, d_inner, n_layers,
                                n_position, dropout);
    c.trg_emb_prj_weight_sharing = tie;
    c.emb_src_trg_weight_sharing = share;
    c.scale_emb_or_prj = scale_embedding ? "emb" : "none";
    c.layout = Layout::Marian;
    c.qkv_bias = c.proj_bias = true;
    c.layer_norm_eps = 1e-5f;   // torch's nn.LayerNorm default
    c.attn_dropout = attention_dropout;
    c.activation = activation;
    c.activation_dropout = activation_dropout;
    c.pe_formula = PositionalFormula::Halves;
    c.embed_layer_norm = false;
    c.xavier_init = false;      // weights come from a checkpoint; N(0, 1) / torch defaults otherwise
    c.logits_bias = true;
    c.trg_pad_mask = false;
    c.decoder_start_idx = pad_idx;
    return c;
}

// 'seed000' and 'seed003' are the older names, accepted as aliases.
Layout parse_layout(const std::string& s, const char* fn) {
    if (s == "post_norm" || s == "seed000") return Layout::PostNorm;
    if (s == "pre_norm" || s == "seed003") return Layout::PreNorm;
    if (s == "marian") return Layout::Marian;
    throw ValueError(std::string(fn) + ": layout must be 'post_norm', 'pre_norm' or 'marian' (older names: 'seed000', "
                     "'seed003'), got '" + s + "'");
}

std::string layout_name(Layout l) {
    return l == Layout::PostNorm ? "post_norm" : l == Layout::PreNorm ? "pre_norm" : "marian";
}

PositionalFormula parse_positional_formula(const std::string& s, const char* fn) {
    if (s == "paired") return PositionalFormula::Paired;
    if (s == "per_index") return PositionalFormula::PerIndex;
    if (s == "halves") return PositionalFormula::Halves;
    throw ValueError(std::string(fn) + ": pe_formula must be 'paired' (the post-norm model), 'per_index' (the pre-norm "
                     "model) or 'halves' (Marian), got '" + s + "'");
}

std::string positional_formula_name(PositionalFormula f) {
    return f == PositionalFormula::Paired ? "paired" : f == PositionalFormula::PerIndex ? "per_index" : "halves";
}

}  // namespace ct::nn
