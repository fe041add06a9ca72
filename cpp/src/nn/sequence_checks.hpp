// Checks on token-id batches at the modules' entry points; each error names the function and the
// argument (src_seq, trg_seq) and says what was expected and what came.
#pragma once
#include <string>

#include "ctransformer/error.hpp"
#include "ctransformer/runtime/tensor.hpp"

namespace ct::nn::detail {

// seq must be (batch, length) with batch, length >= 1, length <= n_position, ids in [0, vocab).
inline void check_token_ids(const IndexArray& seq, std::size_t vocab, std::size_t n_position, const std::string& fn,
                            const char* arg) {
    if (seq.shape.size() != 2)
        throw ValueError(fn + ": " + arg + " must be a 2-D (batch, length) array of token ids, got shape " +
                         shape_str(seq.shape));
    if (seq.shape[0] == 0 || seq.shape[1] == 0)
        throw ValueError(fn + ": " + arg + " must hold at least one sequence of at least one token, got shape " +
                         shape_str(seq.shape));
    if (seq.shape[1] > n_position)
        throw ValueError(fn + ": " + arg + " has length " + std::to_string(seq.shape[1]) +
                         ", longer than n_position = " + std::to_string(n_position) +
                         " (the size of the positional-encoding table)");
    const std::size_t len = seq.shape[1];
    for (std::size_t i = 0; i < seq.data.size(); ++i)
        if (seq.data[i] < 0 || seq.data[i] >= std::int64_t(vocab))
            throw IndexError(fn + ": " + arg + " holds token id " + std::to_string(seq.data[i]) + " at (" +
                             std::to_string(i / len) + ", " + std::to_string(i % len) +
                             "), outside the vocabulary [0, " + std::to_string(vocab) + ")");
}

}  // namespace ct::nn::detail
