// Greedy decoding (the Annotated Transformer's greedy_decode) for a batch: encode once, then extend every
// row with the arg-max of its next-token logits.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "ctransformer/decode/should_stop.hpp"
#include "ctransformer/decode/token_rules.hpp"

#include "ctransformer/nn/transformer.hpp"

namespace ct::decode {

struct GreedyOutput {
    IndexArray ids;                // (b, max_len): start_symbol, then the decoded tokens
    std::optional<Array> logits;   // (b, max_len - 1, n_trg_vocab) when asked for; NaN after a row ended
};

// src (b, ls) source ids; src_mask (b or 1, 1, ls), nonzero = may attend, or null for none.
// Row r gets ids[r, 0] = start_symbol and ids[r, t] = argmax (first maximum) of the logits after
// ids[r, :t]. With end_symbol, a row that produced it is done: its later positions hold the model's
// trg_pad_idx, it is dropped from the batch being decoded, and decoding stops when every row is done.
// use_cache: key/value-cached steps (IncrementalDecoder) or the Annotated Transformer's full-prefix loop.
// Runs without recording a graph; the model is used as it is (call eval() first).
// rules: decode/token_rules.hpp (Marian's banned pad and forced end).
GreedyOutput greedy_decode(const nn::Transformer& model, const IndexArray& src, const Mask* src_mask,
                           std::size_t max_len, std::int64_t start_symbol,
                           std::optional<std::int64_t> end_symbol = std::nullopt, bool use_cache = true,
                           bool return_logits = false, const ShouldStop& should_stop = {},
                           const TokenRules& rules = {});

}  // namespace ct::decode
