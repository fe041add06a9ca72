// IncrementalDecoder: the Transformer's decoder with key/value caches (use_cache = true).
//
// It holds the decoder's Cache (nn/decoder.hpp): per layer, the self-attention's keys/values of every
// target position fed so far, and the cross-attention's keys/values of the encoder output, projected
// once per source. A step runs the decoder's own forward on one token per row at position t with
// that cache: each layer appends the position's keys/values and attends over positions 0..t, which
// is what the no-peek mask allows row t to see in the full-prefix decode.
#pragma once
#include <optional>

#include "ctransformer/decode/kv_cache.hpp"
#include "ctransformer/decode/step_decoder.hpp"

namespace ct::decode {

class IncrementalDecoder : public StepDecoder {
public:
    IncrementalDecoder(const nn::Transformer& model, const IndexArray& src, const Mask* src_mask);
    std::size_t rows() const override { return rows_; }
    std::size_t length() const override { return cache_.length; }
    Tensor step(const std::vector<std::int64_t>& ids) override;
    void select(const std::vector<std::size_t>& rows) override;

    // Layer l's caches (for inspection and tests).
    const KeyValue& self_cache(std::size_t l) const { return cache_.layers.at(l).self; }
    const KeyValue& cross_cache(std::size_t l) const { return cache_.layers.at(l).cross; }

private:
    const nn::Transformer& model_;
    std::optional<Mask> src_mask_;           // (rows or 1, 1, ls)
    nn::Decoder::Cache cache_;
    std::size_t rows_;
    // The source each row decodes. The cross-attention caches and the source mask depend on the
    // source alone, so a selection that leaves every row's source as it was (a beam reordering its
    // hypotheses among themselves) leaves them as they are.
    std::vector<std::size_t> source_;
};

}  // namespace ct::decode
