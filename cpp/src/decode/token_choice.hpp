// How a decoding step chooses its tokens from the logits: greedy's word for one row, and one step of beam search
// for one source. Shared by greedy_decode and beam_search (a batch decoded together) and the continuous batch
// (decode/translation_batch.hpp: sequences joining and leaving between steps), so all choose by the same rules.
#pragma once
#include <cstdint>
#include <vector>

#include "ctransformer/decode/beam_search.hpp"
#include "ctransformer/decode/token_rules.hpp"

namespace ct::decode::detail {

// Greedy's word from one row of logits: the first maximum; with rules.force_end at the last position
// (last_position), end_symbol; a banned maximum gives the first maximum over the ids allowed.
std::int64_t greedy_word(const float* row, std::size_t V, const TokenRules& rules, bool last_position,
                         std::int64_t end_symbol);

struct Live {
    std::vector<std::int64_t> ids;
    double log_prob;
};

struct Candidate {
    double log_prob;
    std::size_t hyp;   // index among the source's live hypotheses
    std::int64_t word;
};

// Each decoder row's best words and their log-softmax: row r's are [r * per_row, r * per_row + n[r]), best first,
// the banned ones dropped (at most beam_size kept); at the last position (forced) end_symbol alone, adding 0
// (Hugging Face's forced eos score). The rows are spread over the threads.
struct BestWords {
    std::size_t per_row = 0;
    std::vector<double> lp;
    std::vector<std::int64_t> word;
    std::vector<std::size_t> n;
    void compute(const float* logits, std::size_t rows, std::size_t V, std::size_t beam_size, const TokenRules& rules,
                 bool forced, std::int64_t end_symbol);
};

struct BeamSettings {
    std::size_t beam_size, n_best, max_len;
    std::int64_t end_symbol;
    double alpha;
    double lp_max;   // length_penalty(max_len - 1, alpha)
};

// The step at position t of a source whose live hypotheses are decoder rows [row0, row0 + live.size()): each is
// extended by its row's best words, the beam_size best extensions kept (ties: the earlier hypothesis, then the
// smaller id); those ending in end_symbol, or reaching max_len, are finished; the rest are the new live
// hypotheses, whose decoder rows (row0 + parent) are appended to parents. Then the early stop (beam_search.hpp).
void advance_beam(std::vector<Live>& live, std::vector<Hypothesis>& finished, const BestWords& best, std::size_t row0,
                  std::size_t t, const BeamSettings& settings, std::vector<Candidate>& scratch,
                  std::vector<std::size_t>& parents);

// A hypothesis of ids (start first) with log_prob, scored by the length penalty.
Hypothesis finished_hypothesis(std::vector<std::int64_t> ids, double log_prob, bool ended, double alpha);

// Best first (stable), at most n_best.
void keep_best(std::vector<Hypothesis>& finished, std::size_t n_best);

}  // namespace ct::decode::detail
