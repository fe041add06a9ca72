// The checks every StepDecoder::step makes on its input ids.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ctransformer/error.hpp"
#include "ctransformer/nn/transformer.hpp"

namespace ct::decode::detail {

inline void check_step_ids(const nn::Transformer& model, const std::vector<std::int64_t>& ids, std::size_t rows,
                           std::size_t length, const char* fn) {
    if (ids.size() != rows)
        throw ValueError(std::string(fn) + ": ids must hold one token per row (" + std::to_string(rows) + "), got " +
                         std::to_string(ids.size()));
    if (length >= model.config.n_position)
        throw ValueError(std::string(fn) + ": target position " + std::to_string(length) +
                         " is beyond the positional-encoding table (n_position = " +
                         std::to_string(model.config.n_position) + ")");
    for (std::size_t r = 0; r < ids.size(); ++r)
        if (ids[r] < 0 || ids[r] >= std::int64_t(model.config.n_trg_vocab))
            throw IndexError(std::string(fn) + ": ids holds token id " + std::to_string(ids[r]) + " at row " +
                             std::to_string(r) + ", outside the target vocabulary [0, " +
                             std::to_string(model.config.n_trg_vocab) + ")");
}

}  // namespace ct::decode::detail
