// The rules Hugging Face's generate() applies to a Marian model's choices, for greedy_decode and beam_search:
// `banned` ids are never chosen (bad_words_ids = [[pad]]; beam search bans them after the log-softmax, so the
// other words' log-probabilities are unchanged), and with force_end a hypothesis that reaches its last
// position ends with end_symbol there (forced_eos_token_id; in beam search that last step adds 0 to its
// log-probability, as Hugging Face's processor sets the forced id's score to 0). Logits returned to the caller are the model's,
// before the rules.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ct::decode {

struct TokenRules {
    std::vector<std::int64_t> banned;
    bool force_end = false;
    bool is_banned(std::int64_t id) const;
    // ValueError naming fn when an id is outside [0, n_vocab), every id is banned, or force_end has no end.
    void check(std::size_t n_vocab, bool has_end, const std::string& fn) const;
};

}  // namespace ct::decode
