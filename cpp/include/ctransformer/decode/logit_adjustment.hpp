// A generation's logits adjusted before its next id is chosen, by OpenAI's definitions (the API reference's
// "Parameter details"): for each id j,
//     logit[j] + logit_bias[j] - presence_penalty * (c[j] > 0) - frequency_penalty * c[j]
// where c[j] counts the times j was chosen so far in this completion (the prompt does not count). vLLM's and
// llama.cpp's servers read the fields so too. The choice (first maximum, or a draw after the temperature) is made
// from the adjusted row; the log-probabilities a request asks for are the model's own (token_logprobs.hpp).
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "ctransformer/decode/continuous_batch.hpp"

namespace ct::decode {

// The counts c of the ids a completion holds.
using TokenCounts = std::unordered_map<std::int64_t, std::uint32_t>;

// Whether options ask to adjust the logits at all (a bias, or a penalty other than 0).
bool adjusts_logits(const SequenceOptions& options);

// The adjusted row of n logits into `out` (resized to n); returns out.data().
const float* adjust_logits(const float* logits, std::size_t n, const SequenceOptions& options,
                           const TokenCounts& counts, std::vector<float>& out);

// ValueError naming `what` unless the biases name ids in [0, n) with finite values in [-100, 100] and the penalties
// are finite in [-2, 2] (OpenAI's ranges).
void check_logit_adjustment(const SequenceOptions& options, std::size_t n, const std::string& what);

}  // namespace ct::decode
