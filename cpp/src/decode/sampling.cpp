#include "ctransformer/decode/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

namespace ct::decode {

std::int64_t sample_top_k(const float* logits, std::size_t n, float temperature, std::size_t k, Generator& generator) {
    std::vector<float> scaled(n);
    for (std::size_t c = 0; c < n; ++c) scaled[c] = logits[c] / temperature;
    // Top-k as the seed: keep the logits >= the k-th largest (ties at the k-th all stay).
    float threshold = -std::numeric_limits<float>::infinity();
    if (k < n) {
        std::vector<float> sorted = scaled;
        std::nth_element(sorted.begin(), sorted.begin() + std::ptrdiff_t(k - 1), sorted.end(), std::greater<float>());
        threshold = sorted[k - 1];
    }
    const float peak = *std::max_element(scaled.begin(), scaled.end());
    std::vector<double> probs(n);
    double total = 0.0;
    for (std::size_t c = 0; c < n; ++c) {
        probs[c] = scaled[c] < threshold ? 0.0 : std::exp(double(scaled[c]) - double(peak));
        total += probs[c];
    }
    // Multinomial draw of one id.
    double u;
    {
        auto lock = generator.lock();
        u = std::uniform_real_distribution<double>(0.0, total)(generator.engine());
    }
    std::size_t chosen = n;
    double cumulative = 0.0;
    for (std::size_t c = 0; c < n; ++c) {
        if (probs[c] == 0.0) continue;
        cumulative += probs[c];
        chosen = c;
        if (u < cumulative) break;
    }
    return std::int64_t(chosen);
}

}  // namespace ct::decode
