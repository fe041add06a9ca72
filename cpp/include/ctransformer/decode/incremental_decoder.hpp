// IncrementalDecoder: the Transformer's decoder with key/value caches (use_cache = true).
//
// Per decoder layer it keeps the self-attention's keys/values of every target position fed so far,
// and the cross-attention's keys/values of the encoder output, projected once per source. A step
// embeds one token per row at position t (word embedding, * sqrt(d_model) when scale_emb, + row t of
// the positional table, dropout, seed 000's LayerNorm), then in each layer appends its keys/values
// and lets it attend over positions 0..t, which is what the no-peek mask allows row t to see in the
// full-prefix decode; every other sub-layer works position by position.
#pragma once
#include <optional>

#include "ctransformer/decode/kv_cache.hpp"
#include "ctransformer/decode/step_decoder.hpp"

namespace ct::decode {

class IncrementalDecoder : public StepDecoder {
public:
    IncrementalDecoder(const nn::Transformer& model, const IndexArray& src, const Mask* src_mask);
    std::size_t rows() const override { return rows_; }
    std::size_t length() const override { return length_; }
    Tensor step(const std::vector<std::int64_t>& ids) override;
    void select(const std::vector<std::size_t>& rows) override;

    // Layer l's caches (for inspection and tests).
    const KeyValue& self_cache(std::size_t l) const { return self_.at(l); }
    const KeyValue& cross_cache(std::size_t l) const { return cross_.at(l); }

private:
    const nn::Transformer& model_;
    std::optional<Mask> src_mask_;           // (rows or 1, 1, ls)
    std::vector<KeyValue> self_, cross_;     // per decoder layer
    std::size_t rows_, length_ = 0;
};

}  // namespace ct::decode
