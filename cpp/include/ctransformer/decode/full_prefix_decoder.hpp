// FullPrefixDecoder: the Annotated Transformer's greedy_decode loop as a StepDecoder (use_cache = false). Each step
// decodes the whole prefix under the no-peek mask and keeps the last position's logits; the encoder
// output is computed once. The reference the cached decoder is held to, and the benchmark baseline.
#pragma once
#include <optional>

#include "ctransformer/decode/step_decoder.hpp"

namespace ct::decode {

class FullPrefixDecoder : public StepDecoder {
public:
    FullPrefixDecoder(const nn::Transformer& model, const IndexArray& src, const Mask* src_mask);
    std::size_t rows() const override { return prefix_.shape[0]; }
    std::size_t length() const override { return prefix_.shape[1]; }
    Tensor step(const std::vector<std::int64_t>& ids) override;
    void select(const std::vector<std::size_t>& rows) override;

private:
    const nn::Transformer& model_;
    std::optional<Mask> src_mask_;   // (rows or 1, 1, ls)
    Tensor memory_;                  // encoder output (rows, ls, d_model)
    IndexArray prefix_;              // (rows, length) target ids fed so far
};

}  // namespace ct::decode
