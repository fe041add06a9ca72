// One source's Hugging Face beam search, step by step (decode/hf_beam_search.hpp has the rules): shared by
// hf_beam_search (a batch in lock step) and the continuous batch (decode/translation_batch.hpp).
#pragma once
#include <cstdint>
#include <vector>

#include "ctransformer/decode/hf_beam_search.hpp"

namespace ct::decode::detail {

class HfBeam {
public:
    HfBeam(std::size_t num_beams, std::size_t max_len, std::int64_t start_symbol, std::int64_t end_symbol,
           double length_penalty, EarlyStopping early_stopping, const TokenRules& rules);
    // The running hypotheses' last tokens: the decoder rows of the next step (num_beams of them, always).
    std::vector<std::int64_t> last_tokens() const;
    // One step over the logits of the running hypotheses (num_beams rows of V); returns the running rows the new
    // running hypotheses extend (the decoder's selection). done() after it: the search of this source is over.
    std::vector<std::size_t> advance(const float* logits, std::size_t V);
    bool done() const { return done_; }
    // The pool, best first, at most n.
    std::vector<Hypothesis> best(std::size_t n) const;

private:
    std::size_t k_, max_len_, cur_len_ = 1;
    std::int64_t end_;
    double length_penalty_;
    EarlyStopping early_stopping_;
    const TokenRules& rules_;
    std::vector<std::vector<std::int64_t>> running_, finished_ids_;
    std::vector<float> running_scores_, finished_scores_;
    std::vector<char> finished_;
    bool improvable_ = true, done_ = false;
};

}  // namespace ct::decode::detail
