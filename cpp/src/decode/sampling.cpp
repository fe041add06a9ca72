#include "ctransformer/decode/sampling.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "../kernels/simd/search.hpp"

namespace ct::decode {

namespace {

// The k-th largest of x (1 <= k < x.size()), counting repeats: nth_element(greater)'s sorted[k - 1]. A small k
// keeps the k largest so far in a min-heap, one pass: once the heap is full nearly every value of a row of logits is
// below its least and costs one comparison (nth_element over GPT-2's 50257 logits and its copy of them took most of
// a sampled row's time). A row holding a NaN keeps nth_element (the heap's comparisons would order it otherwise).
float kth_largest(const std::vector<float>& x, std::size_t k) {
    bool has_nan = false;
    for (float v : x) has_nan |= v != v;
    if (has_nan || k > x.size() / 16) {
        std::vector<float> sorted = x;
        std::nth_element(sorted.begin(), sorted.begin() + std::ptrdiff_t(k - 1), sorted.end(), std::greater<float>());
        return sorted[k - 1];
    }
    std::vector<float> heap(x.begin(), x.begin() + std::ptrdiff_t(k));
    std::make_heap(heap.begin(), heap.end(), std::greater<float>());
    for (std::size_t c = k; c < x.size(); ++c)
        if (x[c] > heap.front()) {   // an equal value leaves the k largest values as they are
            std::pop_heap(heap.begin(), heap.end(), std::greater<float>());
            heap.back() = x[c];
            std::push_heap(heap.begin(), heap.end(), std::greater<float>());
        }
    return heap.front();
}

// The unnormalised probabilities exp(logit / temperature - max) of a row, 0 outside the top k (every logit >= the
// k-th largest stays, ties at the k-th included, as the seed's top-k). Returns their sum.
double top_k_weights(const float* logits, std::size_t n, float temperature, std::size_t k, std::vector<double>& probs) {
    std::vector<float> scaled(n);
    for (std::size_t c = 0; c < n; ++c) scaled[c] = logits[c] / temperature;
    const float threshold = k < n ? kth_largest(scaled, k) : -std::numeric_limits<float>::infinity();
    const float peak = scaled[kernels::search_loops().first_max(scaled.data(), n)];   // std::max_element's answer
    probs.resize(n);
    return kernels::search_loops().exp_weights(scaled.data(), n, threshold, double(peak), probs.data());
}

// One multinomial draw over the weights (their sum total): the first id whose running sum passes u ~ U[0, total).
std::int64_t draw(const std::vector<double>& probs, double total, Generator& generator) {
    double u;
    {
        auto lock = generator.lock();
        u = std::uniform_real_distribution<double>(0.0, total)(generator.engine());
    }
    std::size_t chosen = probs.size();
    double cumulative = 0.0;
    for (std::size_t c = 0; c < probs.size(); ++c) {
        if (probs[c] == 0.0) continue;
        cumulative += probs[c];
        chosen = c;
        if (u < cumulative) break;
    }
    return std::int64_t(chosen);
}

// top_k = 1, greedy: the one largest scaled logit, found without top_k_weights' selection and copies over the
// whole row (a GPT-2 row is 50257 logits, ~1 ms a row: a third of an int8 step at batch 32). The general path's one
// draw is still taken (it always lands on the lone candidate), so the generator's stream, and every later sample,
// is the same. A tie for the largest (the general path draws among the tied), a NaN or a peak that is not finite
// returns nothing: the general path decides, as before.
std::optional<std::int64_t> lone_peak(const float* logits, std::size_t n, float temperature, Generator& generator) {
    const std::size_t best = kernels::search_loops().first_max(logits, n);
    // Dividing by a positive temperature keeps the order but can round neighbours together: count on the scaled
    // values, as top_k_weights compares them.
    const float peak = logits[best] / temperature;
    if (!std::isfinite(peak)) return std::nullopt;
    std::size_t at_peak = 0, nans = 0;
    for (std::size_t c = 0; c < n; ++c) {
        const float s = logits[c] / temperature;
        at_peak += s >= peak;
        nans += s != s;
    }
    if (at_peak != 1 || nans != 0) return std::nullopt;
    {
        auto lock = generator.lock();
        (void)std::uniform_real_distribution<double>(0.0, 1.0)(generator.engine());   // draw()'s, total exp(0)
    }
    return std::int64_t(best);
}

// The ids of the positive weights in order of rising weight, of two equal weights the higher id first (the nucleus's
// order). A positive double's bits order as the double, so a stable LSD radix sort of them, 8 bits a pass, fed the
// ids from the highest down, gives exactly that order; a pass whose byte is the same for every key is skipped. A
// comparison sort of GPT-2's 50257 ids took ~3.5 ms a row.
std::vector<std::uint32_t> rising_order(const std::vector<double>& probs) {
    std::vector<std::uint64_t> key;
    std::vector<std::uint32_t> id;
    for (std::size_t c = probs.size(); c-- > 0;)
        if (probs[c] > 0.0) {
            std::uint64_t bits;
            std::memcpy(&bits, &probs[c], sizeof bits);
            key.push_back(bits);
            id.push_back(std::uint32_t(c));
        }
    const std::size_t m = key.size();
    std::vector<std::array<std::size_t, 256>> counts(8, std::array<std::size_t, 256>{});
    for (std::uint64_t k : key)
        for (int b = 0; b < 8; ++b) ++counts[b][(k >> (8 * b)) & 255];
    std::vector<std::uint64_t> key_to(m);
    std::vector<std::uint32_t> id_to(m);
    for (int b = 0; b < 8; ++b) {
        auto& count = counts[b];
        if (std::find(count.begin(), count.end(), m) != count.end()) continue;   // one byte value: order kept
        std::size_t start = 0;
        for (auto& c : count) start += std::exchange(c, start);
        for (std::size_t i = 0; i < m; ++i) {
            const std::size_t at = count[(key[i] >> (8 * b)) & 255]++;
            key_to[at] = key[i];
            id_to[at] = id[i];
        }
        key.swap(key_to);
        id.swap(id_to);
    }
    return id;
}

}  // namespace

std::int64_t sample_top_k(const float* logits, std::size_t n, float temperature, std::size_t k, Generator& generator) {
    if (k == 1)
        if (const auto greedy = lone_peak(logits, n, temperature, generator)) return *greedy;
    std::vector<double> probs;
    const double total = top_k_weights(logits, n, temperature, k, probs);
    return draw(probs, total, generator);
}

std::int64_t sample_top_k_top_p(const float* logits, std::size_t n, float temperature, std::size_t k, float top_p,
                                Generator& generator) {
    if (k == 1)   // one candidate: the nucleus never drops the last id
        if (const auto greedy = lone_peak(logits, n, temperature, generator)) return *greedy;
    std::vector<double> probs;
    const double total = top_k_weights(logits, n, temperature, k, probs);
    if (!(top_p < 1.0f)) return draw(probs, total, generator);
    // The nucleus: in order of rising probability (ties: the higher id first, so the lower survives), drop while
    // the mass dropped, this id included, is at most 1 - top_p; never the last (most likely) id.
    const std::vector<std::uint32_t> rising = rising_order(probs);
    double dropped = 0.0;
    for (std::size_t i = 0; i + 1 < rising.size(); ++i) {
        dropped += probs[rising[i]];
        if (dropped / total > 1.0 - double(top_p)) break;
        probs[rising[i]] = 0.0;
    }
    double kept = 0.0;
    for (double p : probs) kept += p;
    return draw(probs, kept, generator);
}

}  // namespace ct::decode
