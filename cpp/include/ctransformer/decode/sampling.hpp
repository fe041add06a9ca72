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

}  // namespace ct::decode
