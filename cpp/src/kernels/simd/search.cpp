// search.hpp's loops, for one level (tables.hpp).
#include "search.hpp"

#include <cmath>

#include "per_level.hpp"

namespace ct::kernels {
namespace CT_LOOP_LEVEL {

namespace {

using simd::B;

// std::max_element(x, x + n) - x, written out (no std:: algorithm here: per_level.hpp): best moves to w
// only when x[best] < x[w]. With a NaN in the row the answer depends on where the NaN is.
std::size_t max_element_scan(const float* x, std::size_t n) {
    std::size_t best = 0;
    for (std::size_t w = 1; w < n; ++w)
        if (x[best] < x[w]) best = w;
    return best;
}

// The first maximum of a row, as std::max_element gives it, by vectors: the maximum, then the first
// position holding it. (std::max_element's compare-and-branch over 8000 logits a row is a fifth of greedy
// decoding at batch 32 with int8 products.) A row holding a NaN goes to std::max_element's own scan
// (max_element_scan), whose answer then depends on where the NaN is.
std::size_t first_max(const float* row, std::size_t n) {
    B top(row[0]);
    auto nan = top != top;
    simd::blocks(n, [&](std::size_t i, std::size_t c) {
        const B v = simd::load(row + i, c, row[0]);
        top = xsimd::max(top, v);
        nan = nan || (v != v);
    });
    if (xsimd::any(nan)) return max_element_scan(row, n);
    const float m = simd::hmax(top);
    const B mv(m);
    std::size_t i = 0;
    for (; i + simd::W <= n; i += simd::W)
        if (xsimd::any(B::load_unaligned(row + i) == mv)) break;
    for (; i < n; ++i)
        if (row[i] == m) return i;
    return max_element_scan(row, n);  // not reached: m is one of the row's values
}

// The `k` best words of one row of float32 logits by log_softmax (in float64), best first, ties to the
// smaller id: out_lp[i] = log P(out_word[i]); returns how many (min(k, n)).
//   log P(w) = x[w] - lse,  lse = m + log sum_i exp(x[i] - m),  m = max x.
// Only a hypothesis's own k best words can be among its source's k best candidates (its other words
// have k better ones beside them), so nothing of size beam x vocabulary is kept. log P is x[w] - lse, the
// same lse for the whole row, so the k best words are the k largest logits: they are chosen on the float32
// logits, whole vectors of which are skipped once none beats the k-th so far, and only they get a log P.
// The exponentials are xsimd's float32 exp, added in float64: lse moves by ~1e-7, and every test2016
// translation is the same as with float64 exps (beam 5 at batch 1, beam 4 at batch 32). In float64 (libm's
// exp, or xsimd's on the portable build's two lanes) the exps are a fifth of a beam-5 step at batch 32 with
// int8 products.
std::size_t best_words(const float* x, std::size_t n, std::size_t k, double* out_lp, std::int64_t* out_word) {
    // m by vectors (a maximum is the same in any order)
    const float mf = n ? simd::max(x, n, x[0]) : 0.0f;
    const double m = double(mf);
    std::size_t i = 0;
    // exp(x - m) in float32 (xsimd's, within 1-2 ulp), the terms added in float64, one running sum per
    // lane: one sum in order would be a chain of dependent float64 additions, 8000 of them a row.
    double lane_sum[simd::W] = {};
    alignas(64) float terms[simd::W];
    for (i = 0; i + simd::W <= n; i += simd::W) {
        xsimd::exp(B::load_unaligned(x + i) - B(mf)).store_aligned(terms);
        for (std::size_t j = 0; j < simd::W; ++j) lane_sum[j] += double(terms[j]);
    }
    double sum = 0.0;
    for (std::size_t j = 0; j < simd::W; ++j) sum += lane_sum[j];
    for (; i < n; ++i) sum += std::exp(double(x[i]) - m);
    const double lse = m + std::log(sum);

    std::size_t have = 0;   // out_word [0, have): sorted by logit, best first
    float kth = 0.0f;       // the k-th best logit once have == k
    auto consider = [&](std::size_t w) {
        const float v = x[w];
        if (have == k && !(v > kth)) return;   // equal: the earlier (smaller) word stays
        std::size_t at = have < k ? have++ : k - 1;
        for (; at > 0 && v > x[out_word[at - 1]]; --at) out_word[at] = out_word[at - 1];
        out_word[at] = std::int64_t(w);
        if (have == k) kth = x[out_word[k - 1]];
    };
    std::size_t w = 0;
    for (; w + simd::W <= n; w += simd::W) {
        if (have == k && !xsimd::any(B::load_unaligned(x + w) > B(kth))) continue;
        for (std::size_t j = w; j < w + simd::W; ++j) consider(j);
    }
    for (; w < n; ++w) consider(w);
    for (std::size_t r = 0; r < have; ++r) out_lp[r] = double(x[out_word[r]]) - lse;
    return have;
}

// Sampling's weights over a row, W / 2 float64 lanes at a time: libm's exp one value at a time was most of a
// sampled GPT-2 row (50257 of them, ~0.35 ms). The weights move by an ulp or two, so a draw can only move where
// its uniform lies within ~1e-16 of a running sum. A NaN stays NaN (it is not below the threshold), as before.
double exp_weights(const float* s, std::size_t n, float threshold, double peak, double* probs) {
    using D = xsimd::batch<double>;
    constexpr std::size_t DW = D::size;
    const D cut = D(double(threshold)), top = D(peak), zero = D(0.0);
    D acc(0.0);
    alignas(64) double wide[DW];
    std::size_t c = 0;
    for (; c + DW <= n; c += DW) {
        for (std::size_t j = 0; j < DW; ++j) wide[j] = double(s[c + j]);
        const D x = D::load_aligned(wide);
        const D e = xsimd::select(x < cut, zero, xsimd::exp(x - top));
        e.store_unaligned(probs + c);
        acc += e;
    }
    double total = xsimd::hadd(acc);
    for (; c < n; ++c) {
        probs[c] = s[c] < threshold ? 0.0 : std::exp(double(s[c]) - peak);
        total += probs[c];
    }
    return total;
}

}  // namespace
}  // namespace CT_LOOP_LEVEL

CT_LOOP_TABLE(SearchLoops, search_loops) = {CT_LOOP_LEVEL::first_max, CT_LOOP_LEVEL::best_words,
                                            CT_LOOP_LEVEL::exp_weights};
CT_LOOP_SELECT(SearchLoops, search_loops)

}  // namespace ct::kernels
