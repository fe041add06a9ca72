#include "ctransformer/decode/beam_search.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "ctransformer/runtime/allocator.hpp"
#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/decode/step_decoder.hpp"
#include "../runtime/parallel.hpp"
#include "ctransformer/decode/packed_weights.hpp"
#include "../kernels/simd/search.hpp"
#include "decode_checks.hpp"
#include "token_choice.hpp"

namespace ct::decode {

namespace detail {

namespace {

// Higher log P first; ties to the earlier hypothesis, then the smaller token id (so beam_size 1
// picks what greedy's first-maximum arg-max picks).
bool better(const Candidate& a, const Candidate& b) {
    if (a.log_prob != b.log_prob) return a.log_prob > b.log_prob;
    if (a.hyp != b.hyp) return a.hyp < b.hyp;
    return a.word < b.word;
}

}  // namespace

void BestWords::compute(const float* logits, std::size_t rows, std::size_t V, std::size_t beam_size,
                        const TokenRules& rules, bool forced, std::int64_t end_symbol) {
    per_row = std::min(V, beam_size + rules.banned.size());
    lp.resize(rows * per_row);
    word.resize(rows * per_row);
    n.resize(rows);
    // A row's k best words by the vector loops of the kernel level (kernels/simd/search.cpp).
    const auto best_words = kernels::search_loops().best_words;
    // Each row reads V logits and does V exps; the selection then sees beam_size words a row.
    parallel::parallel_for(rows, 1, [&](std::size_t begin, std::size_t end) {
        for (std::size_t r = begin; r < end; ++r) {
            const float* row = logits + r * V;
            double* row_lp = lp.data() + r * per_row;
            std::int64_t* row_word = word.data() + r * per_row;
            n[r] = best_words(row, V, per_row, row_lp, row_word);
            if (forced) {   // the last position: end_symbol only, adding 0 (Hugging Face's forced eos score)
                row_lp[0] = 0.0;
                row_word[0] = end_symbol;
                n[r] = 1;
                continue;
            }
            std::size_t kept = 0;   // drop the banned words, keep the order
            for (std::size_t i = 0; i < n[r] && kept < beam_size; ++i)
                if (!rules.is_banned(row_word[i])) {
                    row_lp[kept] = row_lp[i];
                    row_word[kept] = row_word[i];
                    ++kept;
                }
            n[r] = kept;
        }
    });
}

Hypothesis finished_hypothesis(std::vector<std::int64_t> ids, double log_prob, bool ended, double alpha) {
    const double score = log_prob / length_penalty(ids.size() - 1, alpha);
    return {std::move(ids), log_prob, score, ended};
}

void advance_beam(std::vector<Live>& live, std::vector<Hypothesis>& finished, const BestWords& best, std::size_t row0,
                  std::size_t t, const BeamSettings& settings, std::vector<Candidate>& candidates,
                  std::vector<std::size_t>& parents) {
    candidates.clear();
    for (std::size_t j = 0; j < live.size(); ++j) {
        const std::size_t r = row0 + j;
        for (std::size_t i = 0; i < best.n[r]; ++i)
            candidates.push_back({live[j].log_prob + best.lp[r * best.per_row + i], j, best.word[r * best.per_row + i]});
    }
    const std::size_t k = std::min(settings.beam_size, candidates.size());
    std::partial_sort(candidates.begin(), candidates.begin() + std::ptrdiff_t(k), candidates.end(), better);
    std::vector<Live> next;
    const std::size_t first_parent = parents.size();
    for (std::size_t i = 0; i < k; ++i) {
        const Candidate& c = candidates[i];
        std::vector<std::int64_t> ids = live[c.hyp].ids;
        ids.push_back(c.word);
        if (c.word == settings.end_symbol)
            finished.push_back(finished_hypothesis(std::move(ids), c.log_prob, true, settings.alpha));
        else if (t + 1 == settings.max_len)   // out of room: finished as it is
            finished.push_back(finished_hypothesis(std::move(ids), c.log_prob, false, settings.alpha));
        else {
            next.push_back({std::move(ids), c.log_prob});
            parents.push_back(row0 + c.hyp);
        }
    }
    // Early stop: no live hypothesis can beat the n_best-th finished one any more.
    if (!next.empty() && finished.size() >= settings.n_best) {
        std::vector<double> scores;
        for (const auto& h : finished) scores.push_back(h.score);
        std::nth_element(scores.begin(), scores.begin() + std::ptrdiff_t(settings.n_best - 1), scores.end(),
                         std::greater<double>());
        double bound = -std::numeric_limits<double>::infinity();
        for (const auto& h : next) bound = std::max(bound, h.log_prob / settings.lp_max);
        if (scores[settings.n_best - 1] >= bound) {
            parents.resize(first_parent);
            next.clear();
        }
    }
    live = std::move(next);
}

std::int64_t greedy_word(const float* row, std::size_t V, const TokenRules& rules, bool last_position,
                         std::int64_t end_symbol) {
    // The first maximum of a row by the vector loops of the kernel level (kernels/simd/search.cpp).
    auto word = std::int64_t(kernels::search_loops().first_max(row, V));
    if (rules.force_end && last_position) return end_symbol;
    if (!rules.is_banned(word)) return word;
    std::int64_t best = -1;   // the first maximum over the ids allowed (a plain scan: rare)
    for (std::size_t j = 0; j < V; ++j)
        if (!rules.is_banned(std::int64_t(j)) && (best < 0 || row[j] > row[best])) best = std::int64_t(j);
    return best;
}

void keep_best(std::vector<Hypothesis>& finished, std::size_t n_best) {
    std::stable_sort(finished.begin(), finished.end(),
                     [](const Hypothesis& a, const Hypothesis& c) { return a.score > c.score; });
    if (finished.size() > n_best) finished.resize(n_best);
}

}  // namespace detail

double length_penalty(std::size_t length, double alpha) { return std::pow((5.0 + double(length)) / 6.0, alpha); }

std::vector<std::vector<Hypothesis>> beam_search(const nn::Transformer& model, const IndexArray& src,
                                                 const Mask* src_mask, std::size_t max_len,
                                                 std::int64_t start_symbol, std::int64_t end_symbol,
                                                 std::size_t beam_size, double alpha, std::size_t n_best,
                                                 bool use_cache, const ShouldStop& should_stop, const TokenRules& rules) {
    const std::string fn = "beam_search";
    detail::check_decode_args(model, src, src_mask, max_len, start_symbol, end_symbol, fn);
    rules.check(model.config.n_trg_vocab, true, fn);
    if (beam_size < 1) throw ValueError(fn + ": beam_size must be at least 1, got " + std::to_string(beam_size));
    if (!std::isfinite(alpha) || alpha < 0.0)
        throw ValueError(fn + ": alpha must be a finite number >= 0, got " + std::to_string(alpha));
    if (n_best < 1 || n_best > beam_size)
        throw ValueError(fn + ": n_best must be between 1 and beam_size = " + std::to_string(beam_size) + ", got " +
                         std::to_string(n_best));
    const std::size_t b = src.shape[0], V = model.config.n_trg_vocab;
    {   // Sizes from user integers, checked before anything grows: each step keeps the beam_size best
        // words of up to b x beam_size decoder rows, and the caller gets b x n_best x max_len ids.
        const std::string beam_what = fn + ": beam_size = " + std::to_string(beam_size);
        const std::size_t candidates = checked_mul(checked_mul(b, beam_size, beam_what), beam_size,
                                                   beam_what + " (b x beam_size rows x beam_size best words)");
        check_fits_in_memory(ct::detail::bytes_of(candidates, sizeof(detail::Candidate) + sizeof(double) + sizeof(std::int64_t)),
                             beam_what + ": its " + std::to_string(candidates) + " candidates per step");
        const std::string best_what = fn + ": n_best = " + std::to_string(n_best);
        const std::size_t ids = checked_mul(checked_mul(b, n_best, best_what), max_len, best_what + " (b x n_best x max_len ids)");
        check_fits_in_memory(ct::detail::bytes_of(ids, sizeof(std::int64_t)), best_what + ": the output of " +
                                                                               std::to_string(ids) + " ids");
    }
    NoGradGuard no_grad;
    PackedWeights packing;   // the call's products of many rows read their weights packed once
    parallel::KeepAwake awake;   // the pool's workers, between the call's products
    const detail::BeamSettings settings{beam_size, n_best, max_len, end_symbol, alpha, length_penalty(max_len - 1, alpha)};

    std::vector<std::vector<detail::Live>> live(b);
    std::vector<std::vector<Hypothesis>> finished(b);
    for (std::size_t s = 0; s < b; ++s) live[s].push_back({{start_symbol}, 0.0});
    if (max_len == 1) {   // nothing to decode: [start_symbol] itself
        for (std::size_t s = 0; s < b; ++s) finished[s].push_back(detail::finished_hypothesis(live[s][0].ids, 0.0, false, alpha));
        return finished;
    }

    auto decoder = make_step_decoder(model, src, src_mask, use_cache);   // row s: source s's first hypothesis
    std::vector<detail::Candidate> candidates;
    detail::BestWords best;
    for (std::size_t t = 1; t < max_len; ++t) {
        check_should_stop(should_stop, "beam_search");
        std::vector<std::int64_t> last;   // decoder rows: the live hypotheses of source 0, then 1, ...
        for (const auto& hyps : live)
            for (const auto& h : hyps) last.push_back(h.ids.back());
        if (last.empty()) break;
        const Tensor logits = decoder->step(last);
        best.compute(logits.data(), last.size(), V, beam_size, rules, rules.force_end && t + 1 == max_len, end_symbol);
        std::vector<std::size_t> parents;   // the decoder row each new live hypothesis extends
        std::size_t row0 = 0;               // decoder row of source s's first live hypothesis
        for (std::size_t s = 0; s < b; ++s) {
            if (live[s].empty()) continue;
            const std::size_t rows_of_source = live[s].size();
            detail::advance_beam(live[s], finished[s], best, row0, t, settings, candidates, parents);
            row0 += rows_of_source;
        }
        if (!parents.empty()) decoder->select(parents);
    }

    for (auto& f : finished) detail::keep_best(f, n_best);
    return finished;
}

}  // namespace ct::decode
