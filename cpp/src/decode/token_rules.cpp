#include "ctransformer/decode/token_rules.hpp"

#include <algorithm>

#include "ctransformer/error.hpp"

namespace ct::decode {

bool TokenRules::is_banned(std::int64_t id) const { return std::find(banned.begin(), banned.end(), id) != banned.end(); }

void TokenRules::check(std::size_t n_vocab, bool has_end, const std::string& fn) const {
    for (std::int64_t id : banned)
        if (id < 0 || id >= std::int64_t(n_vocab))
            throw ValueError(fn + ": a banned id (" + std::to_string(id) + ") is outside the target vocabulary [0, " +
                             std::to_string(n_vocab) + ")");
    std::vector<std::int64_t> distinct = banned;
    std::sort(distinct.begin(), distinct.end());
    if (std::size_t(std::unique(distinct.begin(), distinct.end()) - distinct.begin()) >= n_vocab)
        throw ValueError(fn + ": every id of the target vocabulary is banned");
    if (force_end && !has_end) throw ValueError(fn + ": force_end needs an end_symbol");
}

}  // namespace ct::decode
