#include "ctransformer/decode/logit_adjustment.hpp"

#include <cmath>
#include <string>

#include "ctransformer/error.hpp"

namespace ct::decode {

bool adjusts_logits(const SequenceOptions& o) {
    return !o.logit_bias.empty() || o.presence_penalty != 0.0f || o.frequency_penalty != 0.0f;
}

const float* adjust_logits(const float* logits, std::size_t n, const SequenceOptions& o, const TokenCounts& counts,
                           std::vector<float>& out) {
    out.assign(logits, logits + n);
    for (const auto& [id, bias] : o.logit_bias) out[std::size_t(id)] += bias;
    if (o.presence_penalty != 0.0f || o.frequency_penalty != 0.0f)
        for (const auto& [id, c] : counts) out[std::size_t(id)] -= o.presence_penalty + float(c) * o.frequency_penalty;
    return out.data();
}

void check_logit_adjustment(const SequenceOptions& o, std::size_t n, const std::string& what) {
    for (const auto& [id, bias] : o.logit_bias) {
        if (id < 0 || std::size_t(id) >= n)
            throw ValueError(what + ": logit_bias names token id " + std::to_string(id) + ", outside the vocabulary [0, " +
                             std::to_string(n) + ")");
        if (!(std::abs(bias) <= 100.0f))
            throw ValueError(what + ": logit_bias of token id " + std::to_string(id) + " must be in [-100, 100], got " +
                             std::to_string(bias));
    }
    for (const auto& [name, value] : {std::pair{"presence_penalty", o.presence_penalty},
                                      std::pair{"frequency_penalty", o.frequency_penalty}})
        if (!(std::abs(value) <= 2.0f))
            throw ValueError(what + ": " + name + " must be in [-2, 2], got " + std::to_string(value));
}

}  // namespace ct::decode
