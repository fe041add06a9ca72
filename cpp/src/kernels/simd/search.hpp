// Decoding's searches over a row of logits (decode/greedy.cpp, decode/beam_search.cpp), one row per call,
// per level (tables.hpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "tables.hpp"

namespace ct::kernels {

struct SearchLoops {
    // The first index of the maximum of x[0, n), n >= 1: std::max_element's answer (the first w with
    // x[w] = max x). A row holding a NaN gets std::max_element's scan (x[best] < x[w]), whose answer then
    // depends on where the NaN is.
    std::size_t (*first_max)(const float* x, std::size_t n);
    // The k best words of x[0, n) by log_softmax (in float64), best first, ties to the smaller id:
    // out_lp[i] = log P(out_word[i]), log P(w) = x[w] - lse, lse = m + log sum_i exp(x[i] - m), m = max x.
    // Returns how many (min(k, n)); out_lp and out_word hold k each.
    std::size_t (*best_words)(const float* x, std::size_t n, std::size_t k, double* out_lp, std::int64_t* out_word);
    // Sampling's unnormalised weights (decode/sampling.cpp): probs[c] = exp(s[c] - peak) in float64, 0 where
    // s[c] < threshold; returns their sum (by lanes). xsimd's float64 exp, within an ulp or two of libm's.
    double (*exp_weights)(const float* s, std::size_t n, float threshold, double peak, double* probs);
};

CT_LOOP_TABLES(SearchLoops, search_loops)

}  // namespace ct::kernels
