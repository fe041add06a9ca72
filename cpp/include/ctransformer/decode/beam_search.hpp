// Beam search with the GNMT length penalty (Wu et al. 2016, "Google's Neural Machine Translation
// System"), for a batch of sources, each searched on its own.
//
// A hypothesis y (after start_symbol) of |y| tokens, end_symbol included when it has one, scores
//     score(y) = log P(y | x) / lp(|y|),   lp(n) = ((5 + n) / 6)^alpha,
// log P being the sum of the log-softmax of each of its tokens.
//
// The search, per source: the live hypotheses start as [start_symbol]. At each step every live
// hypothesis is extended by every token, and the beam_size extensions of highest log P (ties: the
// earlier hypothesis, then the smaller token id) are kept; those ending in end_symbol are finished
// and leave the beam, the others stay live (so the beam refills from the survivors next step). At
// max_len positions the live hypotheses are finished as they are. The search of a source stops early
// once its n_best-th best finished score is at least log P / lp(max_len - 1) of every live
// hypothesis: log P only falls as tokens are added and lp only grows (alpha >= 0), so no live
// hypothesis can still overtake it. With beam_size = 1 this is greedy decoding stopped at end_symbol.
#pragma once
#include <cstdint>
#include <vector>

#include "ctransformer/decode/should_stop.hpp"
#include "ctransformer/decode/token_rules.hpp"
#include "ctransformer/nn/transformer.hpp"

namespace ct::decode {

struct Hypothesis {
    std::vector<std::int64_t> ids;   // start_symbol first; at most max_len ids, end_symbol last if it ended
    double log_prob = 0.0;           // log P(ids[1:] | src)
    double score = 0.0;              // log_prob / length_penalty(ids.size() - 1, alpha)
    bool ended = false;              // whether it ended with end_symbol (else it reached max_len)
};

// Beam search's defaults, here once: the C++ signature, the binding, and through it ctransformer.decode,
// the Translator and the multi30k task (ctransformer.decode.DEFAULT_BEAM_SIZE / DEFAULT_ALPHA) read them.
namespace defaults {
inline constexpr std::size_t beam_size = 4;   // as jadore801120's beam search
inline constexpr double alpha = 0.6;           // GNMT's length penalty (Wu et al. 2016)
}  // namespace defaults

// ((5 + length) / 6)^alpha.
double length_penalty(std::size_t length, double alpha);

// src (b, ls), src_mask (b or 1, 1, ls) or null. Returns, per source, its best finished hypotheses
// (at most n_best, at least one), best first. use_cache as in greedy_decode. Runs without a graph;
// the model is used as it is (call eval() first).
std::vector<std::vector<Hypothesis>> beam_search(const nn::Transformer& model, const IndexArray& src,
                                                 const Mask* src_mask, std::size_t max_len,
                                                 std::int64_t start_symbol, std::int64_t end_symbol,
                                                 std::size_t beam_size = defaults::beam_size,
                                                 double alpha = defaults::alpha,
                                                 std::size_t n_best = 1, bool use_cache = true,
                                                 const ShouldStop& should_stop = {}, const TokenRules& rules = {});

}  // namespace ct::decode
