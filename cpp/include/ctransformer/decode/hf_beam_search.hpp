// Hugging Face's beam search (transformers 5's generate(num_beams=k)), for a pretrained Marian model, which was
// tuned with it. It differs from beam_search.hpp's GNMT search in each rule:
// - every source keeps num_beams running hypotheses (the first alone at the start: the others score -1e9); each
//   step adds the log-softmax of the next token (float32), with the banned ids at -inf and, with force_end, every
//   id but end_symbol at -inf and end_symbol at 0 on the last step (bad_words_ids, forced_eos_token_id), and takes
//   the 2 num_beams best continuations over all beams and words (ties: the lower beam * V + word);
// - a continuation that ends (end_symbol, or the length limit) and is among the first num_beams is scored
//   log P / generated_length ** length_penalty and joins the finished pool, which keeps the num_beams best; the
//   best num_beams continuations that do not end run on;
// - early_stopping False (the default): a source is done once its pool is full and the best running hypothesis,
//   scored at its current length, cannot beat the pool's worst; True: once the pool is full; Never: as False,
//   but a positive length_penalty scores the running one at the maximum length.
// Arithmetic is float32 where Hugging Face's is (log-probabilities, running sums, the length division).
#pragma once
#include <cstdint>
#include <vector>

#include "ctransformer/decode/beam_search.hpp"
#include "ctransformer/decode/should_stop.hpp"
#include "ctransformer/decode/token_rules.hpp"
#include "ctransformer/nn/transformer.hpp"

namespace ct::decode {

enum class EarlyStopping { False, True, Never };

// src (b, ls), src_mask (b or 1, 1, ls) or null; max_len counts start_symbol (generate's max_length). Returns per
// source its n_best finished hypotheses, best first (Hypothesis::score the pool's float32 score; log_prob its
// summed log-probabilities).
std::vector<std::vector<Hypothesis>> hf_beam_search(const nn::Transformer& model, const IndexArray& src,
                                                    const Mask* src_mask, std::size_t max_len,
                                                    std::int64_t start_symbol, std::int64_t end_symbol,
                                                    std::size_t num_beams = 4, double length_penalty = 1.0,
                                                    EarlyStopping early_stopping = EarlyStopping::False,
                                                    std::size_t n_best = 1, const ShouldStop& should_stop = {},
                                                    const TokenRules& rules = {});

}  // namespace ct::decode
