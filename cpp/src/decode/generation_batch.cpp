#include "ctransformer/decode/generation_batch.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ctransformer/decode/kv_cache.hpp"
#include "ctransformer/decode/logit_adjustment.hpp"
#include "ctransformer/decode/sampling.hpp"
#include "ctransformer/decode/token_logprobs.hpp"
#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/runtime/random.hpp"
#include "../kernels/simd/search.hpp"

namespace ct::decode {

struct GenerationBatch::Sequence {
    std::uint64_t id;
    SequenceOptions options;
    std::vector<std::int64_t> ids;       // the prompt, then the ids made
    std::size_t prompt = 0;
    nn::gpt::GPT::Cache cache;
    std::optional<Generator> generator;
    std::vector<float> pending;          // logits computed outside the batched step (the prompt, a rebuilt window)
    TokenCounts counts;                  // the ids made so far, counted (only when a penalty reads them)
    std::vector<float> adjusted;         // the step's logits after the request's bias and penalties
    std::size_t rows() const { return 1; }
};

GenerationBatch::GenerationBatch(const nn::gpt::GPT& model, std::optional<std::int64_t> end_symbol)
    : model_(model), end_symbol_(end_symbol) {
    if (end_symbol && (*end_symbol < 0 || *end_symbol >= std::int64_t(model.vocab_size)))
        throw IndexError("GenerationBatch: end_symbol = " + std::to_string(*end_symbol) + " is outside the vocabulary [0, " +
                         std::to_string(model.vocab_size) + ")");
}

GenerationBatch::~GenerationBatch() = default;

std::size_t GenerationBatch::rows() const { return sequences_.size(); }
std::size_t GenerationBatch::size() const { return sequences_.size(); }

void GenerationBatch::check(const std::vector<std::int64_t>& prompt, const SequenceOptions& options,
                            const std::string& what) const {
    if (prompt.empty()) throw ValueError(what + ": the prompt is empty (it needs one id at least)");
    for (std::size_t i = 0; i < prompt.size(); ++i)
        if (prompt[i] < 0 || prompt[i] >= std::int64_t(model_.vocab_size))
            throw IndexError(what + ": the prompt holds token id " + std::to_string(prompt[i]) + " at " + std::to_string(i) +
                             ", outside the vocabulary [0, " + std::to_string(model_.vocab_size) + ")");
    if (options.beam_size != 1 || options.n_best != 1)
        throw ValueError(what + ": a GPT generates one sequence per request (beam_size 1, n_best 1)");
    if (options.max_len <= prompt.size())
        throw ValueError(what + ": max_len (the prompt's " + std::to_string(prompt.size()) +
                         " ids and the new ones) must leave room for one new id at least, got " +
                         std::to_string(options.max_len));
    if (!(options.top_p > 0.0f && options.top_p <= 1.0f))
        throw ValueError(what + ": top_p must be in (0, 1], got " + std::to_string(options.top_p));
    if (!std::isfinite(options.temperature) || options.temperature < 0.0f)
        throw ValueError(what + ": temperature must be a finite number >= 0, got " + std::to_string(options.temperature));
    check_logit_adjustment(options, model_.vocab_size, what);
    if (options.top_logprobs > max_top_logprobs)
        throw ValueError(what + ": top_logprobs must be at most " + std::to_string(max_top_logprobs) + ", got " +
                         std::to_string(options.top_logprobs));
}

namespace {

// The last max_seq_len ids of a context: the window generate feeds when it (re)builds the cache.
std::vector<std::int64_t> window(const std::vector<std::int64_t>& ids, std::size_t max_seq_len) {
    const std::size_t n = std::min(ids.size(), max_seq_len);
    return {ids.end() - std::ptrdiff_t(n), ids.end()};
}

}  // namespace

void GenerationBatch::admit(const std::vector<std::uint64_t>& ids, const std::vector<std::vector<std::int64_t>>& prompts,
                            const std::vector<SequenceOptions>& options) {
    if (ids.size() != prompts.size() || ids.size() != options.size())
        throw ValueError("GenerationBatch.admit: ids, prompts and options must have one entry each per sequence");
    for (std::size_t i = 0; i < ids.size(); ++i) check(prompts[i], options[i], "GenerationBatch.admit");
    NoGradGuard no_grad;
    const std::size_t C = model_.max_seq_len, V = model_.vocab_size;
    std::vector<std::size_t> order(ids.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    const auto length = [&](std::size_t i) { return std::min(prompts[i].size(), C); };
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return length(a) < length(b); });
    std::vector<std::unique_ptr<Sequence>> admitted(ids.size());
    for (std::size_t g0 = 0; g0 < order.size();) {   // one pass per cropped prompt length, no padding
        const std::size_t t = length(order[g0]);
        std::size_t g1 = g0;
        while (g1 < order.size() && length(order[g1]) == t) ++g1;
        const std::size_t n = g1 - g0;
        IndexArray idx{std::vector<std::int64_t>(n * t), {n, t}};
        for (std::size_t j = 0; j < n; ++j) {
            const auto w = window(prompts[order[g0 + j]], C);
            std::copy(w.begin(), w.end(), idx.data.begin() + std::ptrdiff_t(j * t));
        }
        nn::gpt::GPT::Cache group = model_.start_cache();
        const Tensor logits = model_.last_logits(model_.hidden(idx, &group));   // (n, V)
        for (std::size_t j = 0; j < n; ++j) {
            const std::size_t i = order[g0 + j];
            auto seq = std::make_unique<Sequence>();
            seq->id = ids[i];
            seq->options = options[i];
            seq->ids = prompts[i];
            seq->prompt = prompts[i].size();
            seq->cache = model_.start_cache();
            seq->cache.length = t;
            for (std::size_t l = 0; l < group.layers.size(); ++l) {
                seq->cache.layers[l] = select_rows(group.layers[l], std::vector<std::size_t>{j});
                // its first growth makes room for the whole request (kv_cache.hpp)
                seq->cache.layers[l].reserve = std::min(options[i].max_len, C);
            }
            if (options[i].temperature > 0.0f) seq->generator.emplace(options[i].seed);
            seq->pending.assign(logits.data() + j * V, logits.data() + (j + 1) * V);
            admitted[i] = std::move(seq);
        }
        g0 = g1;
    }
    for (auto& seq : admitted) sequences_.push_back(std::move(seq));
}

bool GenerationBatch::retire(std::uint64_t id) { return erase_sequence(sequences_, id); }

std::vector<std::uint64_t> GenerationBatch::move_to(ContinuousBatch& to, std::size_t rows) {
    auto* other = dynamic_cast<GenerationBatch*>(&to);
    if (!other || &other->model_ != &model_)
        throw ValueError("GenerationBatch.move_to: `to` must be a GenerationBatch of the same model");
    return move_sequences(sequences_, other->sequences_, rows);
}

ContinuousBatch::StepResult GenerationBatch::step() {
    StepResult result;
    if (sequences_.empty()) return result;
    NoGradGuard no_grad;
    const std::size_t C = model_.max_seq_len, V = model_.vocab_size;
    // Feed each sequence's last id: in one batch where the window has room, else (the window full) rebuild that
    // sequence's cache from its cropped context, as generate does.
    std::vector<std::int64_t> last;
    std::vector<nn::gpt::GPT::Cache*> caches;
    std::vector<std::size_t> offsets{0}, batched;
    for (std::size_t si = 0; si < sequences_.size(); ++si) {
        Sequence& s = *sequences_[si];
        if (!s.pending.empty()) continue;
        if (s.cache.length + 1 <= C) {
            last.push_back(s.ids.back());
            caches.push_back(&s.cache);
            offsets.push_back(last.size());
            batched.push_back(si);
        } else {
            const auto w = window(s.ids, C);
            s.cache = model_.start_cache();
            const Tensor logits = model_.last_logits(model_.hidden(IndexArray{w, {1, w.size()}}, &s.cache));
            s.pending.assign(logits.data(), logits.data() + V);
        }
    }
    Tensor logits;
    if (!batched.empty()) logits = model_.logits_sequences(last, caches, offsets);
    std::vector<const float*> rows(sequences_.size(), nullptr);
    for (std::size_t i = 0; i < batched.size(); ++i) rows[batched[i]] = logits.data() + i * V;
    const auto first_max = kernels::search_loops().first_max;
    std::vector<std::unique_ptr<Sequence>> still;
    for (std::size_t si = 0; si < sequences_.size(); ++si) {
        auto& s = sequences_[si];
        const float* logits_row = rows[si] ? rows[si] : s->pending.data();
        const SequenceOptions& o = s->options;
        const float* row = adjusts_logits(o) ? adjust_logits(logits_row, V, o, s->counts, s->adjusted) : logits_row;
        const std::int64_t word =
            o.temperature > 0.0f
                ? sample_top_k_top_p(row, V, o.temperature, o.top_k ? std::min(o.top_k, V) : V, o.top_p,
                                     *s->generator)
                : std::int64_t(first_max(row, V));
        s->ids.push_back(word);
        if (o.presence_penalty != 0.0f || o.frequency_penalty != 0.0f) ++s->counts[word];
        const bool ended = end_symbol_ && word == *end_symbol_;
        if (!ended) {
            Token token{s->id, word, 0.0f, {}};
            if (o.logprobs) {   // the model's own (logits_row), not the adjusted row's
                TokenLogprobs lp = token_logprobs(logits_row, V, word, o.top_logprobs);
                token.logprob = lp.chosen;
                token.top = std::move(lp.top);
            }
            result.tokens.push_back(std::move(token));
        }
        s->pending.clear();
        if (ended || s->ids.size() >= o.max_len) {
            std::vector<std::int64_t> made(s->ids.begin() + std::ptrdiff_t(s->prompt), s->ids.end());
            if (ended) made.pop_back();
            result.finished.push_back({s->id, std::move(made), 0.0, ended, {}, {}});
            continue;
        }
        still.push_back(std::move(s));
    }
    sequences_ = std::move(still);
    return result;
}

}  // namespace ct::decode
