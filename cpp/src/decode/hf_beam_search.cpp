#include "ctransformer/decode/hf_beam_search.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "ctransformer/decode/packed_weights.hpp"
#include "ctransformer/decode/step_decoder.hpp"
#include "ctransformer/runtime/autograd.hpp"
#include "../runtime/parallel.hpp"
#include "decode_checks.hpp"
#include "hf_beam.hpp"

namespace ct::decode {

namespace detail {

namespace {

constexpr float kNeg = -1.0e9f;   // Hugging Face's stand-in for minus infinity in its scores

// Indices of the k largest of values, largest first; ties: the lower index.
std::vector<std::size_t> top(const std::vector<float>& values, std::size_t k) {
    std::vector<std::size_t> index(values.size());
    std::iota(index.begin(), index.end(), std::size_t(0));
    k = std::min(k, values.size());
    std::partial_sort(index.begin(), index.begin() + std::ptrdiff_t(k), index.end(), [&](std::size_t a, std::size_t b) {
        return values[a] != values[b] ? values[a] > values[b] : a < b;
    });
    index.resize(k);
    return index;
}

// float32 log-softmax of one row, as NumPy's over float32: shifted = x - max, shifted - log(sum exp(shifted)).
void log_softmax(const float* x, std::size_t n, float* out) {
    const float top_value = *std::max_element(x, x + n);
    float sum = 0.0f;
    for (std::size_t i = 0; i < n; ++i) sum += std::exp(x[i] - top_value);
    const float log_sum = std::log(sum);
    for (std::size_t i = 0; i < n; ++i) out[i] = (x[i] - top_value) - log_sum;
}

float length_power(double length, double length_penalty) { return float(std::pow(length, length_penalty)); }

}  // namespace

HfBeam::HfBeam(std::size_t num_beams, std::size_t max_len, std::int64_t start_symbol, std::int64_t end_symbol,
               double length_penalty, EarlyStopping early_stopping, const TokenRules& rules)
    : k_(num_beams), max_len_(max_len), end_(end_symbol), length_penalty_(length_penalty),
      early_stopping_(early_stopping), rules_(rules), running_(num_beams, std::vector<std::int64_t>{start_symbol}),
      finished_ids_(num_beams, std::vector<std::int64_t>{start_symbol}), running_scores_(num_beams, kNeg),
      finished_scores_(num_beams, kNeg), finished_(num_beams, 0) {
    running_scores_[0] = 0.0f;   // the first beam alone at the start
}

std::vector<std::int64_t> HfBeam::last_tokens() const {
    std::vector<std::int64_t> last;
    for (const auto& ids : running_) last.push_back(ids.back());
    return last;
}

std::vector<std::size_t> HfBeam::advance(const float* logits, std::size_t V) {
    const std::size_t k = k_;
    // total[j V + w] = running score of beam j + log P(w | beam j), with the rules.
    std::vector<float> total(k * V);
    const bool forced = rules_.force_end && cur_len_ == max_len_ - 1;
    for (std::size_t j = 0; j < k; ++j) {
        float* row = total.data() + j * V;
        log_softmax(logits + j * V, V, row);
        for (std::int64_t id : rules_.banned) row[id] = -std::numeric_limits<float>::infinity();
        if (forced) {
            std::fill(row, row + V, -std::numeric_limits<float>::infinity());
            row[end_] = 0.0f;
        }
        for (std::size_t w = 0; w < V; ++w) row[w] += running_scores_[j];
    }
    const std::vector<std::size_t> best = top(total, 2 * k);
    const std::size_t n = best.size();
    std::vector<float> top_scores(n), run_scores(n);
    std::vector<std::size_t> parent(n);
    std::vector<std::vector<std::int64_t>> candidates(n);
    std::vector<char> ends(n);
    bool all_end = true;
    for (std::size_t i = 0; i < n; ++i) {
        top_scores[i] = total[best[i]];
        parent[i] = best[i] / V;
        const auto word = std::int64_t(best[i] % V);
        candidates[i] = running_[parent[i]];
        candidates[i].push_back(word);
        ends[i] = word == end_ || cur_len_ + 1 >= max_len_;
        all_end = all_end && ends[i];
        run_scores[i] = top_scores[i] + (ends[i] ? kNeg : 0.0f);
    }
    // The num_beams best continuations that do not end run on (ended ones sink by kNeg).
    const std::vector<std::size_t> keep = top(run_scores, k);
    std::vector<std::size_t> parents(keep.size());
    std::vector<std::vector<std::int64_t>> running(keep.size());
    std::vector<float> running_scores(keep.size());
    for (std::size_t i = 0; i < keep.size(); ++i) {
        running[i] = candidates[keep[i]];
        running_scores[i] = run_scores[keep[i]];
        parents[i] = parent[keep[i]];
    }
    // The first num_beams continuations that end join the pool, scored by their generated length.
    bool pool_full = true;
    for (char f : finished_) pool_full = pool_full && f;
    const float divisor = length_power(double(cur_len_), length_penalty_);
    std::vector<float> merged(finished_scores_);
    for (std::size_t i = 0; i < n; ++i) {
        float score = top_scores[i] / divisor;
        if (early_stopping_ == EarlyStopping::True) score += pool_full ? kNeg : 0.0f;
        score += improvable_ ? 0.0f : kNeg;
        score += (ends[i] && i < k) ? 0.0f : kNeg;
        merged.push_back(score);
    }
    const std::vector<std::size_t> order = top(merged, k);
    std::vector<std::vector<std::int64_t>> finished_ids(k);
    std::vector<float> finished_scores(k);
    std::vector<char> finished(k);
    for (std::size_t i = 0; i < k; ++i) {
        const std::size_t o = order[i];
        if (o < k) {
            finished_ids[i] = finished_ids_[o];
            finished_scores[i] = finished_scores_[o];
            finished[i] = finished_[o];
        } else {
            finished_ids[i] = candidates[o - k];
            finished_scores[i] = merged[o];
            finished[i] = ends[o - k] && (o - k) < k;
        }
    }
    finished_ids_ = std::move(finished_ids);
    finished_scores_ = std::move(finished_scores);
    finished_ = std::move(finished);
    running_ = std::move(running);
    running_scores_ = std::move(running_scores);
    cur_len_ += 1;

    // Whether the running hypotheses can still beat the pool.
    const double hypothetical = early_stopping_ == EarlyStopping::Never && length_penalty_ > 0
                                    ? double(max_len_ - 1)
                                    : double(cur_len_ - 1);
    const float best_running = running_scores_[0] / length_power(hypothetical, length_penalty_);
    const float worst_finished = *std::min_element(finished_scores_.begin(), finished_scores_.end());
    bool can_improve = false;
    pool_full = true;
    for (std::size_t i = 0; i < k; ++i) {
        can_improve = can_improve || best_running > (finished_[i] ? worst_finished : kNeg);
        pool_full = pool_full && finished_[i];
    }
    improvable_ = improvable_ && can_improve;
    const bool open_beams = !(pool_full && early_stopping_ == EarlyStopping::True);
    done_ = !(improvable_ && open_beams && !all_end);
    return parents;
}

std::vector<Hypothesis> HfBeam::best(std::size_t n) const {
    std::vector<Hypothesis> out;
    for (std::size_t i = 0; i < std::min(n, k_); ++i) {
        Hypothesis h;
        h.ids = finished_ids_[i];
        h.score = double(finished_scores_[i]);
        h.ended = h.ids.size() > 1 && h.ids.back() == end_;
        h.log_prob = double(finished_scores_[i]) * double(length_power(double(h.ids.size() - 1), length_penalty_));
        out.push_back(std::move(h));
    }
    return out;
}

}  // namespace detail

std::vector<std::vector<Hypothesis>> hf_beam_search(const nn::Transformer& model, const IndexArray& src,
                                                    const Mask* src_mask, std::size_t max_len,
                                                    std::int64_t start_symbol, std::int64_t end_symbol,
                                                    std::size_t num_beams, double length_penalty,
                                                    EarlyStopping early_stopping, std::size_t n_best,
                                                    const ShouldStop& should_stop, const TokenRules& rules) {
    const std::string fn = "hf_beam_search";
    detail::check_decode_args(model, src, src_mask, max_len, start_symbol, end_symbol, fn);
    rules.check(model.config.n_trg_vocab, true, fn);
    if (max_len < 2)
        throw ValueError(fn + ": max_len must be at least 2 (the start symbol and one token), got " + std::to_string(max_len));
    if (num_beams < 1) throw ValueError(fn + ": num_beams must be at least 1");
    if (!std::isfinite(length_penalty)) throw ValueError(fn + ": length_penalty must be a finite number");
    if (n_best < 1 || n_best > num_beams)
        throw ValueError(fn + ": n_best must be between 1 and num_beams = " + std::to_string(num_beams) + ", got " +
                         std::to_string(n_best));
    const std::size_t b = src.shape[0], V = model.config.n_trg_vocab;
    check_fits_in_memory(ct::detail::bytes_of(checked_mul(checked_mul(b, num_beams, fn + ": num_beams"), V,
                                                          fn + ": b x num_beams x the vocabulary"), sizeof(float)),
                         fn + ": num_beams = " + std::to_string(num_beams) + ": its scores per step");
    NoGradGuard no_grad;
    PackedWeights packing;
    parallel::KeepAwake awake;
    std::vector<detail::HfBeam> beams;
    for (std::size_t s = 0; s < b; ++s)
        beams.emplace_back(num_beams, max_len, start_symbol, end_symbol, length_penalty, early_stopping, rules);
    auto decoder = make_step_decoder(model, src, src_mask, true);
    std::vector<std::size_t> rows;   // every source's num_beams rows (the first step's beams read its source row)
    for (std::size_t s = 0; s < b; ++s) rows.insert(rows.end(), num_beams, s);
    decoder->select(rows);
    std::vector<std::size_t> live(b);   // the sources still searched, in decoder-row order
    std::iota(live.begin(), live.end(), std::size_t(0));
    while (!live.empty()) {
        check_should_stop(should_stop, "hf_beam_search");
        std::vector<std::int64_t> last;
        for (std::size_t s : live) {
            const auto tokens = beams[s].last_tokens();
            last.insert(last.end(), tokens.begin(), tokens.end());
        }
        const Tensor logits = decoder->step(last);
        std::vector<std::size_t> select, still;
        for (std::size_t i = 0; i < live.size(); ++i) {
            detail::HfBeam& beam = beams[live[i]];
            const std::vector<std::size_t> parents = beam.advance(logits.data() + i * num_beams * V, V);
            if (beam.done()) continue;
            for (std::size_t p : parents) select.push_back(i * num_beams + p);
            still.push_back(live[i]);
        }
        live = std::move(still);
        if (!live.empty()) decoder->select(select);
    }
    std::vector<std::vector<Hypothesis>> out;
    for (const auto& beam : beams) out.push_back(beam.best(n_best));
    return out;
}

}  // namespace ct::decode
