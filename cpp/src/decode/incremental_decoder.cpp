#include "ctransformer/decode/incremental_decoder.hpp"

#include <cmath>
#include <cstring>

#include "ctransformer/autograd.hpp"
#include "ctransformer/decode/cached_attention.hpp"
#include "ctransformer/ops/elementwise.hpp"
#include "ctransformer/ops/shape.hpp"
#include "step_checks.hpp"

namespace ct::decode {

IncrementalDecoder::IncrementalDecoder(const nn::Transformer& model, const IndexArray& src, const Mask* src_mask)
    : model_(model), rows_(src.shape.empty() ? 0 : src.shape[0]) {
    NoGradGuard no_grad;
    if (src_mask) src_mask_ = *src_mask;
    const Tensor memory = model.encode(src, src_mask).output;   // (b, ls, d_model)
    // The cross-attention's keys/values: the same for every target position, projected once.
    for (const auto& layer : model.decoder->layers) {
        cross_.push_back(project_kv(*layer->enc_attn, memory));
        self_.emplace_back();
    }
}

Tensor IncrementalDecoder::step(const std::vector<std::int64_t>& ids) {
    detail::check_step_ids(model_, ids, rows_, length_, "IncrementalDecoder.step");
    NoGradGuard no_grad;
    const nn::Decoder& dec = *model_.decoder;
    const nn::TransformerConfig& c = model_.config;
    const std::size_t d = dec.position_enc->d_hid;

    // The decoder's front for one position: emb (* sqrt(d_model)) + PE[t] -> dropout -> LayerNorm.
    Tensor x = dec.trg_word_emb->forward(IndexArray{ids, {rows_, 1}});   // (rows, 1, d)
    if (dec.scale_emb) x = scale(x, float(std::sqrt(double(c.d_model))));
    Array pe = Array::from_shape({1, 1, d});
    std::memcpy(pe.data(), dec.position_enc->pos_table.data() + length_ * d, d * sizeof(float));
    x = add(x, Tensor(std::move(pe)));
    if (dec.dropout) x = dec.dropout->forward(x);
    if (dec.layer_norm) x = dec.layer_norm->forward(x);

    const Mask* src_mask = src_mask_ ? &*src_mask_ : nullptr;
    for (std::size_t l = 0; l < dec.layers.size(); ++l) {
        const nn::DecoderLayer& layer = *dec.layers[l];
        // Self-attention: this position's keys/values join the earlier ones; the new query may see all
        // of them (no mask needed: nothing later exists yet).
        const KeyValue fresh = project_kv(*layer.slf_attn, x);
        append_positions(self_[l], fresh.k, fresh.v);
        x = attend_projected(*layer.slf_attn, x, self_[l]).first;
        x = attend_projected(*layer.enc_attn, x, cross_[l], src_mask).first;
        x = layer.pos_ffn->forward(x);
    }
    ++length_;
    return reshape(model_.project(x), {std::int64_t(rows_), std::int64_t(c.n_trg_vocab)});
}

void IncrementalDecoder::select(const std::vector<std::size_t>& rows) {
    for (auto& kv : self_) kv = select_rows(kv, rows);
    for (auto& kv : cross_) kv = select_rows(kv, rows);
    if (src_mask_) src_mask_ = select_rows(*src_mask_, rows);
    rows_ = rows.size();
}

}  // namespace ct::decode
