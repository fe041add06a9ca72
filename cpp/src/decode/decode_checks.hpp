// Argument checks shared by greedy_decode and beam_search; each error names the argument.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "ctransformer/error.hpp"
#include "ctransformer/nn/transformer.hpp"
#include "nn/sequence_checks.hpp"

namespace ct::decode::detail {

inline void check_symbol(const nn::Transformer& model, std::int64_t id, const std::string& fn, const char* arg) {
    if (id < 0 || id >= std::int64_t(model.config.n_trg_vocab))
        throw IndexError(fn + ": " + arg + " = " + std::to_string(id) + " is outside the target vocabulary [0, " +
                         std::to_string(model.config.n_trg_vocab) + ")");
}

// src (b, ls) ids of the source vocabulary, ls <= n_position; src_mask (b or 1, 1, ls) or null.
inline void check_source(const nn::Transformer& model, const IndexArray& src, const Mask* src_mask,
                         const std::string& fn) {
    const nn::TransformerConfig& c = model.config;
    nn::detail::check_token_ids(src, c.n_src_vocab, c.n_position, fn, "src");
    const std::size_t b = src.shape[0], ls = src.shape[1];
    if (src_mask) {
        const Shape& s = src_mask->shape;
        if (s.size() != 3 || (s[0] != b && s[0] != 1) || s[1] != 1 || s[2] != ls)
            throw ValueError(fn + ": src_mask must have shape (batch = " + std::to_string(b) + " or 1, 1, src_len = " +
                             std::to_string(ls) + ") to match src " + shape_str(src.shape) + ", got " + shape_str(s));
        // With a -inf fill (the pre-norm model) a row that may attend nowhere makes softmax 0/0 = NaN.
        if (std::isinf(c.mask_fill))
            for (std::size_t r = 0; r < s[0]; ++r)
                if (std::none_of(src_mask->data.begin() + std::ptrdiff_t(r * ls),
                                 src_mask->data.begin() + std::ptrdiff_t((r + 1) * ls), [](std::uint8_t m) { return m != 0; }))
                    throw ValueError(fn + ": src_mask row " + std::to_string(r) +
                                     " masks every source position; with this model's -inf mask fill its "
                                     "attention would be NaN");
    }
}

inline void check_decode_args(const nn::Transformer& model, const IndexArray& src, const Mask* src_mask,
                              std::size_t max_len, std::int64_t start_symbol, std::optional<std::int64_t> end_symbol,
                              const std::string& fn) {
    const nn::TransformerConfig& c = model.config;
    check_source(model, src, src_mask, fn);
    if (max_len < 1) throw ValueError(fn + ": max_len must be at least 1, got " + std::to_string(max_len));
    // Positions 0 .. max_len - 2 are fed to the decoder (the last token is predicted, never fed).
    if (max_len - 1 > c.n_position)
        throw ValueError(fn + ": max_len = " + std::to_string(max_len) + " needs " + std::to_string(max_len - 1) +
                         " target positions, more than n_position = " + std::to_string(c.n_position) +
                         " (the size of the positional-encoding table)");
    check_symbol(model, start_symbol, fn, "start_symbol");
    if (end_symbol) check_symbol(model, *end_symbol, fn, "end_symbol");
}

}  // namespace ct::decode::detail
