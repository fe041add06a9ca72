#include "ctransformer/decode/incremental_decoder.hpp"

#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/error.hpp"
#include "ctransformer/ops/shape.hpp"
#include "step_checks.hpp"

namespace ct::decode {

IncrementalDecoder::IncrementalDecoder(const nn::Transformer& model, const IndexArray& src, const Mask* src_mask)
    : model_(model), rows_(src.shape.empty() ? 0 : src.shape[0]) {
    NoGradGuard no_grad;
    for (std::size_t r = 0; r < rows_; ++r) source_.push_back(r);
    if (src_mask) src_mask_ = *src_mask;
    // The cross-attentions' keys/values of the encoder output are projected here, once per source. The rows the
    // source mask hides are read by no query, so the encoder's feed-forward skips them (a padded batch's pads).
    cache_ = model.decoder->start_cache(model.encode(src, src_mask, false, true).output);
}

Tensor IncrementalDecoder::step(const std::vector<std::int64_t>& ids) {
    detail::check_step_ids(model_, ids, rows_, cache_.length, "IncrementalDecoder.step");
    NoGradGuard no_grad;
    // One position per row; no target mask: nothing later than it exists yet.
    const Mask* src_mask = src_mask_ ? &*src_mask_ : nullptr;
    // check_step_ids scanned the ids: the decoder and its embedding do not again.
    const Tensor x = model_.decoder->forward_valid_ids(IndexArray{ids, {rows_, 1}}, nullptr, cache_, src_mask).output;
    // (rows, 1, d_model) to (rows, d_model) before the projection, not its (rows, 1, n_trg_vocab) output after:
    // reshape copies, and the logits are 8000 floats a row.
    return model_.project(reshape(x, {std::int64_t(rows_), std::int64_t(x.size(2))}));
}

void IncrementalDecoder::select(const std::vector<std::size_t>& rows) {
    std::vector<std::size_t> source(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) {
        if (rows[i] >= rows_)
            throw IndexError("select_rows: row " + std::to_string(rows[i]) + " of a decoder with " + std::to_string(rows_) +
                             " rows");
        source[i] = source_[rows[i]];
    }
    const bool same_sources = source == source_;
    for (auto& layer : cache_.layers) {
        select_rows_in_place(layer.self, rows);
        // The cross-attention's keys/values are the source's: its hypotheses share them through a row map.
        if (!same_sources) layer.cross = share_rows(layer.cross, rows);
    }
    if (src_mask_ && !same_sources) src_mask_ = select_rows(*src_mask_, rows);
    source_ = std::move(source);
    rows_ = rows.size();
}

}  // namespace ct::decode
