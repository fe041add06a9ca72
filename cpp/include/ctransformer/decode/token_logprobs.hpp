// The log-probabilities a generation reports with its ids (OpenAI's logprobs): log_softmax of the model's logits
// at that position, log p[j] = logit[j] - log(sum_k exp(logit[k])), before the request's logit adjustments and
// temperature (vLLM's default, its "raw" logprobs). The sum runs in double after subtracting the largest logit, so
// it neither overflows nor depends on the summation order beyond double's rounding.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace ct::decode {

struct TokenLogprobs {
    float chosen = 0.0f;                               // the chosen id's
    std::vector<std::pair<std::int64_t, float>> top;   // the `top` likeliest ids, most likely first (ties: lower id)
};

// Largest number of alternatives a request may ask for (OpenAI's top_logprobs limit).
inline constexpr std::size_t max_top_logprobs = 20;

TokenLogprobs token_logprobs(const float* logits, std::size_t n, std::int64_t chosen, std::size_t top);

}  // namespace ct::decode
