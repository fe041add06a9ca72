#include "ctransformer/decode/full_prefix_decoder.hpp"

#include <cstring>

#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/decode/kv_cache.hpp"
#include "ctransformer/nn/masks.hpp"
#include "ctransformer/ops/shape.hpp"
#include "step_checks.hpp"

namespace ct::decode {

FullPrefixDecoder::FullPrefixDecoder(const nn::Transformer& model, const IndexArray& src, const Mask* src_mask)
    : model_(model) {
    NoGradGuard no_grad;
    if (src_mask) src_mask_ = *src_mask;
    memory_ = model.encode(src, src_mask, false, true).output;   // (incremental_decoder.cpp: the pads skipped)
    prefix_.shape = {src.shape.empty() ? 0 : src.shape[0], 0};
}

Tensor FullPrefixDecoder::step(const std::vector<std::int64_t>& ids) {
    const std::size_t rows = this->rows(), t = length();
    detail::check_step_ids(model_, ids, rows, t, "FullPrefixDecoder.step");
    NoGradGuard no_grad;
    IndexArray longer{std::vector<std::int64_t>(rows * (t + 1)), {rows, t + 1}};
    for (std::size_t r = 0; r < rows; ++r) {
        std::copy_n(prefix_.data.begin() + std::ptrdiff_t(r * t), t, longer.data.begin() + std::ptrdiff_t(r * (t + 1)));
        longer.data[r * (t + 1) + t] = ids[r];
    }
    prefix_ = std::move(longer);

    const Mask trg_mask = nn::get_subsequent_mask(t + 1);
    const Tensor out = model_.decode(prefix_, &trg_mask, memory_, src_mask_ ? &*src_mask_ : nullptr).output;
    // The last position of each row, (rows, d_model), then the projection: (rows, n_trg_vocab).
    const std::size_t d = out.size(2);
    Array last = Array::from_shape({rows, d});
    for (std::size_t r = 0; r < rows; ++r) std::memcpy(last.data() + r * d, out.data() + (r * (t + 1) + t) * d, d * sizeof(float));
    return model_.project(Tensor(std::move(last)));
}

void FullPrefixDecoder::select(const std::vector<std::size_t>& rows) {
    memory_ = select_rows(memory_, rows);
    prefix_ = select_rows(prefix_, rows);
    if (src_mask_) src_mask_ = select_rows(*src_mask_, rows);
}

}  // namespace ct::decode
