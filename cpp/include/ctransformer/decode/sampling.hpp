// Drawing the next token from a row of logits, as the GPT reference's generate: softmax(logits / temperature)
// restricted to the top_k largest (every logit >= the k-th largest stays, ties included), one
// multinomial draw from the library generator. Shared by GPT::generate and the cached generate, so
// equal logits and an equal generator state give equal tokens.
#pragma once
#include <cstdint>

#include "ctransformer/runtime/random.hpp"

namespace ct::decode {

// logits: n values; k in 1..n (k >= n keeps them all); temperature > 0.
std::int64_t sample_top_k(const float* logits, std::size_t n, float temperature, std::size_t k, Generator& generator);

// The same with nucleus sampling after the top-k filter, by transformers' TopPLogitsWarper rule: over the ids left,
// in order of rising probability, those whose cumulative probability is at most 1 - top_p are dropped (the most
// likely id always stays). top_p >= 1 drops nothing: sample_top_k's draw exactly.
std::int64_t sample_top_k_top_p(const float* logits, std::size_t n, float temperature, std::size_t k, float top_p,
                                Generator& generator);

}  // namespace ct::decode
