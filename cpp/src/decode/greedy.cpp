#include "ctransformer/decode/greedy.hpp"

#include <algorithm>
#include <limits>

#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/decode/step_decoder.hpp"
#include "ctransformer/decode/packed_weights.hpp"
#include "../runtime/parallel.hpp"
#include "decode_checks.hpp"
#include "token_choice.hpp"

namespace ct::decode {

GreedyOutput greedy_decode(const nn::Transformer& model, const IndexArray& src, const Mask* src_mask,
                           std::size_t max_len, std::int64_t start_symbol, std::optional<std::int64_t> end_symbol,
                           bool use_cache, bool return_logits, const ShouldStop& should_stop, const TokenRules& rules) {
    detail::check_decode_args(model, src, src_mask, max_len, start_symbol, end_symbol, "greedy_decode");
    rules.check(model.config.n_trg_vocab, end_symbol.has_value(), "greedy_decode");
    NoGradGuard no_grad;
    PackedWeights packing;   // the call's products of many rows read their weights packed once
    parallel::KeepAwake awake;   // the pool's workers, between the call's products
    const std::size_t b = src.shape[0], V = model.config.n_trg_vocab;
    GreedyOutput result;
    result.ids = {std::vector<std::int64_t>(b * max_len, model.config.trg_pad_idx), {b, max_len}};
    for (std::size_t r = 0; r < b; ++r) result.ids.data[r * max_len] = start_symbol;
    if (return_logits) {
        result.logits = new_array({b, max_len - 1, V}, "greedy_decode: the logits (return_logits=True)");
        result.logits->fill(std::numeric_limits<float>::quiet_NaN());
    }
    if (max_len == 1) return result;

    auto decoder = make_step_decoder(model, src, src_mask, use_cache);
    std::vector<std::size_t> active(b);   // decoder row i is batch row active[i]
    for (std::size_t r = 0; r < b; ++r) active[r] = r;
    std::vector<std::int64_t> next(b, start_symbol);

    for (std::size_t t = 1; t < max_len && !active.empty(); ++t) {
        check_should_stop(should_stop, "greedy_decode");
        const Tensor logits = decoder->step(next);   // (active, V)
        std::vector<std::size_t> keep;
        std::vector<std::int64_t> kept_next;
        for (std::size_t i = 0; i < active.size(); ++i) {
            const float* row = logits.data() + i * V;
            const std::int64_t word = detail::greedy_word(row, V, rules, t + 1 == max_len, end_symbol.value_or(-1));
            result.ids.data[active[i] * max_len + t] = word;
            if (return_logits) std::copy_n(row, V, result.logits->data() + (active[i] * (max_len - 1) + t - 1) * V);
            if (end_symbol && word == *end_symbol) continue;   // this row is done; pad follows
            keep.push_back(i);
            kept_next.push_back(word);
        }
        if (keep.size() != active.size()) {
            std::vector<std::size_t> still(keep.size());
            for (std::size_t j = 0; j < keep.size(); ++j) still[j] = active[keep[j]];
            active = std::move(still);
            if (!active.empty()) decoder->select(keep);
        }
        next = std::move(kept_next);
    }
    return result;
}

}  // namespace ct::decode
