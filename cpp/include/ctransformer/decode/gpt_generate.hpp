// GPT generation with the key/value cache: the same tokens as GPT::generate (the GPT reference's loop, which
// re-runs the whole context for every new token), at one position's work per token.
//
// Cropping. The context is cropped to its last max_seq_len ids, as GPT::generate does. The GPT's
// positions are learned absolute embeddings, so a crop moves every kept token to a new position,
// and each layer's keys/values depend (through the layers below) on the tokens the crop dropped: no
// cached key survives a crop, and sliding the cache would change the result. So while the context
// fits, each token costs one position; once it exceeds max_seq_len the cache is rebuilt from the
// cropped window at every step (one full forward of max_seq_len positions, the uncached cost) and the
// result stays identical to the uncached generate.
#pragma once
#include <cstdint>
#include <optional>

#include "ctransformer/decode/should_stop.hpp"
#include "ctransformer/nn/gpt/gpt.hpp"

namespace ct::decode {

// idx (b, t) ids; appends max_new_tokens ids per row, each drawn by sample_top_k from the library
// generator (the draws of GPT::generate, in the same order). Returns (b, t + max_new_tokens).
// should_stop is called before each token (decode/should_stop.hpp).
IndexArray generate(const nn::gpt::GPT& model, const IndexArray& idx, std::size_t max_new_tokens,
                    float temperature = 1.0f, std::optional<std::int64_t> top_k = std::nullopt,
                    const ShouldStop& should_stop = {});
// The same, or with use_cache=false GPT::generate, the reference's loop (the same ids, uncached): the one
// place that chooses, for both bindings (ctransformer.decode.generate and GPT.generate).
IndexArray generate(const nn::gpt::GPT& model, const IndexArray& idx, std::size_t max_new_tokens, float temperature,
                    std::optional<std::int64_t> top_k, const ShouldStop& should_stop, bool use_cache);

}  // namespace ct::decode
