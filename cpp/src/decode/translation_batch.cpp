#include "ctransformer/decode/translation_batch.hpp"

#include <algorithm>

#include "ctransformer/decode/kv_cache.hpp"
#include "ctransformer/decode/logit_adjustment.hpp"
#include "ctransformer/runtime/autograd.hpp"
#include "decode_checks.hpp"
#include "hf_beam.hpp"
#include "token_choice.hpp"

namespace ct::decode {

// One sequence: its decoder cache (rows = its live hypotheses) and its search's state.
struct TranslationBatch::Sequence {
    std::uint64_t id;
    SequenceOptions options;
    nn::Decoder::Cache cache;
    std::vector<detail::Live> live;          // greedy: one hypothesis; GNMT's beam: up to beam_size
    std::vector<Hypothesis> finished;
    std::unique_ptr<detail::HfBeam> hf;      // Hugging Face's search: its num_beams rows, always
    std::size_t rows() const { return hf ? options.beam_size : live.size(); }
    void last_tokens(std::vector<std::int64_t>& out) const {
        if (hf) {
            const auto tokens = hf->last_tokens();
            out.insert(out.end(), tokens.begin(), tokens.end());
        } else {
            for (const auto& h : live) out.push_back(h.ids.back());
        }
    }
};

namespace {

// A finished hypothesis as the batch's output: its ids without the start symbol, nor the end symbol if it ended.
// A hypothesis' output ids: no start symbol, no end symbol.
std::vector<std::int64_t> output_ids(const Hypothesis& h) {
    std::vector<std::int64_t> ids(h.ids.begin() + 1, h.ids.end());
    if (h.ended && !ids.empty()) ids.pop_back();
    return ids;
}

ContinuousBatch::Finished output(std::uint64_t id, const Hypothesis& h) {
    return {id, output_ids(h), h.score, h.ended, {}, {}};
}

// The best of `best` (best first, at least one), the rest as its alternatives.
ContinuousBatch::Finished output(std::uint64_t id, const std::vector<Hypothesis>& best) {
    ContinuousBatch::Finished f = output(id, best.front());
    for (std::size_t i = 1; i < best.size(); ++i) {
        f.alternatives.push_back(output_ids(best[i]));
        f.alternative_scores.push_back(best[i].score);
    }
    return f;
}

}  // namespace

TranslationBatch::TranslationBatch(const nn::Transformer& model, std::int64_t start_symbol, std::int64_t end_symbol,
                             TokenRules rules)
    : model_(model), start_symbol_(start_symbol), end_symbol_(end_symbol),
      rules_(std::move(rules)) {
    const std::string fn = "TranslationBatch";
    detail::check_symbol(model, start_symbol, fn, "start_symbol");
    detail::check_symbol(model, end_symbol, fn, "end_symbol");
    rules_.check(model.config.n_trg_vocab, true, fn);
}

TranslationBatch::~TranslationBatch() = default;

std::size_t TranslationBatch::rows() const {
    std::size_t n = 0;
    for (const auto& s : sequences_) n += s->rows();
    return n;
}

std::size_t TranslationBatch::size() const { return sequences_.size(); }

void TranslationBatch::check(const std::vector<std::int64_t>& source, const SequenceOptions& options,
                          const std::string& what) const {
    const nn::TransformerConfig& c = model_.config;
    if (source.empty()) throw ValueError(what + ": the source is empty (end of sentence included, it has one id at least)");
    detail::check_source(model_, IndexArray{source, {1, source.size()}}, nullptr, what);
    if (options.beam_size < 1) throw ValueError(what + ": beam_size must be at least 1");
    const bool gnmt = options.search == SequenceOptions::Search::Gnmt;
    if (!std::isfinite(options.alpha) || (gnmt && options.alpha < 0.0))
        throw ValueError(what + ": the length penalty must be a finite number" + (gnmt ? " >= 0" : "") + ", got " +
                         std::to_string(options.alpha));
    if (options.max_len < 2 || options.max_len - 1 > c.n_position)
        throw ValueError(what + ": max_len (target positions, the start symbol counted) must be in [2, n_position + 1 = " +
                         std::to_string(c.n_position + 1) + "], got " + std::to_string(options.max_len));
    if (options.n_best < 1 || options.n_best > options.beam_size)
        throw ValueError(what + ": n_best must be between 1 and beam_size = " + std::to_string(options.beam_size) +
                         ", got " + std::to_string(options.n_best));
    if (adjusts_logits(options) || options.logprobs || options.top_logprobs)
        throw ValueError(what + ": logit_bias, presence_penalty, frequency_penalty and logprobs are a generation's "
                                "options; a translation takes none of them");
}

void TranslationBatch::admit(const std::vector<std::uint64_t>& ids, const std::vector<std::vector<std::int64_t>>& sources,
                          const std::vector<SequenceOptions>& options) {
    if (ids.size() != sources.size() || ids.size() != options.size())
        throw ValueError("TranslationBatch.admit: ids, sources and options must have one entry each per sequence");
    if (ids.empty()) return;
    for (std::size_t i = 0; i < ids.size(); ++i) check(sources[i], options[i], "TranslationBatch.admit");
    NoGradGuard no_grad;
    // One encoder pass per source length among the newcomers, with no pad: a source's encoder output is then
    // computed as if it were encoded alone (the same attention products, of its own length; an int8 model's
    // products are exact), and no work goes to padding. The cross-attention's keys/values are projected in the
    // same pass.
    std::vector<std::size_t> order(ids.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return sources[a].size() < sources[b].size(); });
    std::vector<std::unique_ptr<Sequence>> admitted(ids.size());
    for (std::size_t g0 = 0; g0 < order.size();) {
        const std::size_t length = sources[order[g0]].size();
        std::size_t g1 = g0;
        while (g1 < order.size() && sources[order[g1]].size() == length) ++g1;
        const std::size_t n = g1 - g0;
        IndexArray src{std::vector<std::int64_t>(n * length), {n, length}};
        for (std::size_t j = 0; j < n; ++j)
            std::copy(sources[order[g0 + j]].begin(), sources[order[g0 + j]].end(),
                      src.data.begin() + std::ptrdiff_t(j * length));
        const nn::Decoder::Cache group = model_.decoder->start_cache(model_.encode(src, nullptr).output);
        for (std::size_t j = 0; j < n; ++j) {
            const std::size_t i = order[g0 + j];
            auto seq = std::make_unique<Sequence>();
            seq->id = ids[i];
            seq->options = options[i];
            const bool hf = options[i].search == SequenceOptions::Search::HuggingFace;
            for (const auto& layer : group.layers) {   // this source's rows of the keys/values
                nn::KeyValue cross = select_rows(layer.cross, std::vector<std::size_t>{j});
                // Hugging Face's search runs num_beams rows from the start: each reads the source's one row.
                if (hf) cross = share_rows(cross, std::vector<std::size_t>(options[i].beam_size, 0));
                seq->cache.layers.push_back({nn::KeyValue{}, std::move(cross)});
            }
            if (hf)
                seq->hf = std::make_unique<detail::HfBeam>(options[i].beam_size, options[i].max_len, start_symbol_,
                                                           end_symbol_, options[i].alpha, options[i].early_stopping,
                                                           rules_);
            else
                seq->live.push_back({{start_symbol_}, 0.0});
            admitted[i] = std::move(seq);
        }
        g0 = g1;
    }
    for (auto& seq : admitted) sequences_.push_back(std::move(seq));
}

bool TranslationBatch::retire(std::uint64_t id) { return erase_sequence(sequences_, id); }

std::vector<std::uint64_t> TranslationBatch::move_to(ContinuousBatch& to, std::size_t rows) {
    auto* other = dynamic_cast<TranslationBatch*>(&to);
    if (!other || &other->model_ != &model_)
        throw ValueError("TranslationBatch.move_to: `to` must be a TranslationBatch of the same model");
    return move_sequences(sequences_, other->sequences_, rows);
}

TranslationBatch::StepResult TranslationBatch::step() {
    StepResult result;
    if (sequences_.empty()) return result;
    NoGradGuard no_grad;
    std::vector<std::int64_t> last;
    std::vector<nn::Decoder::Cache*> caches;
    std::vector<std::size_t> offsets{0};
    for (const auto& s : sequences_) {
        s->last_tokens(last);
        caches.push_back(&s->cache);
        offsets.push_back(last.size());
    }
    const Tensor logits = model_.project(model_.decoder->forward_sequences(last, caches, offsets));
    const std::size_t V = model_.config.n_trg_vocab;
    std::vector<std::unique_ptr<Sequence>> still;
    detail::BestWords best;
    std::vector<detail::Candidate> candidates;
    for (std::size_t si = 0; si < sequences_.size(); ++si) {
        auto& s = sequences_[si];
        const std::size_t t = s->cache.length;   // the position of the token chosen now
        const bool last_position = t + 1 == s->options.max_len;
        const float* rows = logits.data() + offsets[si] * V;
        if (s->hf) {   // Hugging Face's search: as hf_beam_search, this sequence's rows only
            const std::vector<std::size_t> parents = s->hf->advance(rows, V);
            if (s->hf->done()) {
                result.finished.push_back(output(s->id, s->hf->best(s->options.n_best)));
                continue;
            }
            for (auto& layer : s->cache.layers) select_rows_in_place(layer.self, parents);
        } else if (s->options.beam_size == 1) {   // greedy: as greedy_decode, ended by end_symbol or the length
            const std::int64_t word = detail::greedy_word(rows, V, rules_, last_position, end_symbol_);
            auto& h = s->live[0];
            h.ids.push_back(word);
            if (word != end_symbol_) result.tokens.push_back({s->id, word, 0.0f, {}});
            if (word == end_symbol_ || last_position) {
                result.finished.push_back(output(s->id, detail::finished_hypothesis(std::move(h.ids), 0.0,
                                                                                    word == end_symbol_, s->options.alpha)));
                continue;
            }
        } else {   // beam search: as beam_search, this sequence's rows only
            const SequenceOptions& o = s->options;
            const detail::BeamSettings settings{o.beam_size, o.n_best, o.max_len, end_symbol_, o.alpha,
                                                length_penalty(o.max_len - 1, o.alpha)};
            best.compute(rows, s->rows(), V, o.beam_size, rules_, rules_.force_end && last_position, end_symbol_);
            std::vector<std::size_t> parents;
            detail::advance_beam(s->live, s->finished, best, 0, t, settings, candidates, parents);
            if (s->live.empty()) {
                detail::keep_best(s->finished, o.n_best);
                result.finished.push_back(output(s->id, s->finished));
                continue;
            }
            for (auto& layer : s->cache.layers) {
                select_rows_in_place(layer.self, parents);   // nothing to do when every hypothesis kept its row
                // The source's keys/values: every hypothesis reads its one row, so only their count can change.
                if (layer.cross.rows() != parents.size())
                    layer.cross = share_rows(layer.cross, std::vector<std::size_t>(parents.size(), 0));
            }
        }
        still.push_back(std::move(s));
    }
    sequences_ = std::move(still);
    return result;
}

}  // namespace ct::decode
