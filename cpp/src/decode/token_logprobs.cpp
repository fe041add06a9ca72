#include "ctransformer/decode/token_logprobs.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ct::decode {

TokenLogprobs token_logprobs(const float* logits, std::size_t n, std::int64_t chosen, std::size_t top) {
    const float peak = *std::max_element(logits, logits + n);
    double total = 0.0;
    for (std::size_t j = 0; j < n; ++j) total += std::exp(double(logits[j]) - double(peak));
    const double log_z = double(peak) + std::log(total);
    const auto logprob = [&](std::size_t j) { return float(double(logits[j]) - log_z); };
    TokenLogprobs out;
    out.chosen = logprob(std::size_t(chosen));
    top = std::min(top, n);
    if (top == 0) return out;
    std::vector<std::int64_t> order(n);
    std::iota(order.begin(), order.end(), std::int64_t(0));
    std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(top), order.end(), [&](auto a, auto b) {
        return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    });
    for (std::size_t i = 0; i < top; ++i) out.top.emplace_back(order[i], logprob(std::size_t(order[i])));
    return out;
}

}  // namespace ct::decode
