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

namespace ct::decode {

namespace {

struct Live {
    std::vector<std::int64_t> ids;
    double log_prob;
};

struct Candidate {
    double log_prob;
    std::size_t hyp;   // index among the source's live hypotheses
    std::int64_t word;
};

// Higher log P first; ties to the earlier hypothesis, then the smaller token id (so beam_size 1
// picks what greedy's first-maximum arg-max picks).
bool better(const Candidate& a, const Candidate& b) {
    if (a.log_prob != b.log_prob) return a.log_prob > b.log_prob;
    if (a.hyp != b.hyp) return a.hyp < b.hyp;
    return a.word < b.word;
}

}  // namespace

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
    // Each row's best words: beam_size of them after the banned ones are dropped.
    const std::size_t per_row = std::min(V, beam_size + rules.banned.size());
    {   // Sizes from user integers, checked before anything grows: each step keeps the beam_size best
        // words of up to b x beam_size decoder rows, and the caller gets b x n_best x max_len ids.
        const std::string beam_what = fn + ": beam_size = " + std::to_string(beam_size);
        const std::size_t candidates = checked_mul(checked_mul(b, beam_size, beam_what), beam_size,
                                                   beam_what + " (b x beam_size rows x beam_size best words)");
        check_fits_in_memory(ct::detail::bytes_of(candidates, sizeof(Candidate) + sizeof(double) + sizeof(std::int64_t)),
                             beam_what + ": its " + std::to_string(candidates) + " candidates per step");
        const std::string best_what = fn + ": n_best = " + std::to_string(n_best);
        const std::size_t ids = checked_mul(checked_mul(b, n_best, best_what), max_len, best_what + " (b x n_best x max_len ids)");
        check_fits_in_memory(ct::detail::bytes_of(ids, sizeof(std::int64_t)), best_what + ": the output of " +
                                                                               std::to_string(ids) + " ids");
    }
    NoGradGuard no_grad;
    PackedWeights packing;   // the call's products of many rows read their weights packed once
    parallel::KeepAwake awake;   // the pool's workers, between the call's products
    const double lp_max = length_penalty(max_len - 1, alpha);

    std::vector<std::vector<Live>> live(b);
    std::vector<std::vector<Hypothesis>> finished(b);
    for (std::size_t s = 0; s < b; ++s) live[s].push_back({{start_symbol}, 0.0});
    auto finish = [&](std::size_t s, std::vector<std::int64_t> ids, double log_prob, bool ended) {
        const double score = log_prob / length_penalty(ids.size() - 1, alpha);
        finished[s].push_back({std::move(ids), log_prob, score, ended});
    };
    if (max_len == 1) {   // nothing to decode: [start_symbol] itself
        for (std::size_t s = 0; s < b; ++s) finish(s, live[s][0].ids, 0.0, false);
        return finished;
    }

    auto decoder = make_step_decoder(model, src, src_mask, use_cache);   // row s: source s's first hypothesis
    std::vector<Candidate> candidates;
    std::vector<double> row_lp;          // row r's best words: [r * per_row, r * per_row + row_n[r])
    std::vector<std::int64_t> row_word;
    std::vector<std::size_t> row_n;
    // A row's k best words by the vector loops of the kernel level (kernels/simd/search.cpp).
    const auto best_words = kernels::search_loops().best_words;
    for (std::size_t t = 1; t < max_len; ++t) {
        check_should_stop(should_stop, "beam_search");
        std::vector<std::int64_t> last;   // decoder rows: the live hypotheses of source 0, then 1, ...
        for (const auto& hyps : live)
            for (const auto& h : hyps) last.push_back(h.ids.back());
        if (last.empty()) break;
        const Tensor logits = decoder->step(last);
        // Each decoder row's log-softmax and best words, the rows spread over the threads (each row
        // reads V logits and does V exps; the selection below then sees beam_size words a row).
        const std::size_t rows = last.size();
        row_lp.resize(rows * per_row);
        row_word.resize(rows * per_row);
        row_n.resize(rows);
        const bool forced = rules.force_end && t + 1 == max_len;
        parallel::parallel_for(rows, 1, [&](std::size_t begin, std::size_t end) {
            for (std::size_t r = begin; r < end; ++r) {
                const float* row = logits.data() + r * V;
                double* lp = row_lp.data() + r * per_row;
                std::int64_t* word = row_word.data() + r * per_row;
                row_n[r] = best_words(row, V, per_row, lp, word);
                if (forced) {   // the last position: end_symbol only, adding 0 (Hugging Face's forced eos score)
                    lp[0] = 0.0;
                    word[0] = end_symbol;
                    row_n[r] = 1;
                    continue;
                }
                std::size_t kept = 0;   // drop the banned words, keep the order
                for (std::size_t i = 0; i < row_n[r] && kept < beam_size; ++i)
                    if (!rules.is_banned(word[i])) {
                        lp[kept] = lp[i];
                        word[kept] = word[i];
                        ++kept;
                    }
                row_n[r] = kept;
            }
        });

        std::vector<std::size_t> parents;   // the decoder row each new live hypothesis extends
        std::size_t row0 = 0;               // decoder row of source s's first live hypothesis
        for (std::size_t s = 0; s < b; ++s) {
            std::vector<Live>& hyps = live[s];
            if (hyps.empty()) continue;
            candidates.clear();
            for (std::size_t j = 0; j < hyps.size(); ++j) {
                const std::size_t r = row0 + j;
                for (std::size_t i = 0; i < row_n[r]; ++i)
                    candidates.push_back({hyps[j].log_prob + row_lp[r * per_row + i], j, row_word[r * per_row + i]});
            }
            const std::size_t k = std::min(beam_size, candidates.size());
            std::partial_sort(candidates.begin(), candidates.begin() + std::ptrdiff_t(k), candidates.end(), better);
            std::vector<Live> next;
            for (std::size_t i = 0; i < k; ++i) {
                const Candidate& c = candidates[i];
                std::vector<std::int64_t> ids = hyps[c.hyp].ids;
                ids.push_back(c.word);
                if (c.word == end_symbol)
                    finish(s, std::move(ids), c.log_prob, true);
                else if (t + 1 == max_len)   // out of room: finished as it is
                    finish(s, std::move(ids), c.log_prob, false);
                else {
                    next.push_back({std::move(ids), c.log_prob});
                    parents.push_back(row0 + c.hyp);
                }
            }
            row0 += hyps.size();
            // Early stop: no live hypothesis can beat the n_best-th finished one any more.
            if (!next.empty() && finished[s].size() >= n_best) {
                std::vector<double> scores;
                for (const auto& h : finished[s]) scores.push_back(h.score);
                std::nth_element(scores.begin(), scores.begin() + std::ptrdiff_t(n_best - 1), scores.end(),
                                 std::greater<double>());
                double bound = -std::numeric_limits<double>::infinity();
                for (const auto& h : next) bound = std::max(bound, h.log_prob / lp_max);
                if (scores[n_best - 1] >= bound) {
                    parents.resize(parents.size() - next.size());
                    next.clear();
                }
            }
            hyps = std::move(next);
        }
        if (!parents.empty()) decoder->select(parents);
    }

    for (auto& f : finished) {
        std::stable_sort(f.begin(), f.end(), [](const Hypothesis& a, const Hypothesis& c) { return a.score > c.score; });
        if (f.size() > n_best) f.resize(n_best);
    }
    return finished;
}

}  // namespace ct::decode
