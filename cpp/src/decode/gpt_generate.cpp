#include "ctransformer/decode/gpt_generate.hpp"

#include <algorithm>
#include <cmath>

#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/decode/gpt_incremental.hpp"
#include "ctransformer/decode/packed_weights.hpp"
#include "ctransformer/decode/sampling.hpp"
#include "ctransformer/error.hpp"
#include "ctransformer/runtime/random.hpp"
#include "generate_checks.hpp"
#include "../runtime/parallel.hpp"

namespace ct::decode {

namespace {

void check_generate_args(const nn::gpt::GPT& model, const IndexArray& idx, float temperature,
                         std::optional<std::int64_t> top_k) {
    const std::string fn = "generate";
    if (idx.shape.size() != 2 || idx.shape[0] == 0 || idx.shape[1] == 0)
        throw ValueError(fn + ": idx must have shape (batch, seq_len) with both at least 1, got " + shape_str(idx.shape));
    for (std::size_t i = 0; i < idx.numel(); ++i)
        if (idx.data[i] < 0 || idx.data[i] >= std::int64_t(model.vocab_size))
            throw IndexError(fn + ": idx holds token id " + std::to_string(idx.data[i]) + " at (" +
                             std::to_string(i / idx.shape[1]) + ", " + std::to_string(i % idx.shape[1]) +
                             "), outside the vocabulary [0, " + std::to_string(model.vocab_size) + ")");
    if (!(temperature > 0.0f) || !std::isfinite(temperature))
        throw ValueError(fn + ": temperature must be a positive finite number, got " + std::to_string(temperature));
    if (top_k && *top_k < 1) throw ValueError(fn + ": top_k must be at least 1, got " + std::to_string(*top_k));
}

}  // namespace

IndexArray generate(const nn::gpt::GPT& model, const IndexArray& idx, std::size_t max_new_tokens, float temperature,
                    std::optional<std::int64_t> top_k, const ShouldStop& should_stop) {
    check_generate_args(model, idx, temperature, top_k);
    NoGradGuard no_grad;
    PackedWeights packing;       // a batch's steps (3 rows or more) read the weights packed once for the call
    parallel::KeepAwake awake;   // the pool's workers, between a step's products
    const std::size_t b = idx.shape[0], t0 = idx.shape[1], V = model.vocab_size, C = model.max_seq_len;
    const std::size_t k = top_k ? std::min<std::size_t>(std::size_t(*top_k), V) : V;
    const std::size_t T_end = detail::checked_generate_length(b, t0, max_new_tokens, "generate");
    // One growing vector per row: memory grows with the tokens made, not all at once up front (a
    // long request would otherwise zero-fill its whole output before the first, interruptible, step).
    std::vector<std::vector<std::int64_t>> rows(b);
    for (std::size_t r = 0; r < b; ++r)
        rows[r].assign(idx.data.begin() + std::ptrdiff_t(r * t0), idx.data.begin() + std::ptrdiff_t((r + 1) * t0));

    // The ids [from, to) of every row, as a (b, to - from) batch.
    auto columns = [&](std::size_t from, std::size_t to) {
        IndexArray ids{std::vector<std::int64_t>(b * (to - from)), {b, to - from}};
        for (std::size_t r = 0; r < b; ++r)
            std::copy_n(rows[r].begin() + std::ptrdiff_t(from), to - from, ids.data.begin() + std::ptrdiff_t(r * (to - from)));
        return ids;
    };

    GPTIncremental cache(model);
    cache.reserve(std::min(T_end, C));   // the window's most positions: the caches never grow by copying
    for (std::size_t T = t0; T < T_end; ++T) {   // T ids so far; the cache holds the window minus the last id
        check_should_stop(should_stop, "generate");
        Tensor logits;
        if (cache.length() > 0 && cache.length() + 1 <= C) {
            logits = cache.step(columns(T - 1, T));   // the one id the cache has not seen
        } else {
            // First step, or the window slid past max_seq_len: (re)build from the cropped context.
            cache.reset();
            logits = cache.step(columns(T - std::min(T, C), T));
        }
        for (std::size_t r = 0; r < b; ++r)
            rows[r].push_back(sample_top_k(logits.data() + r * V, V, temperature, k, default_generator()));
    }
    IndexArray out{std::vector<std::int64_t>(b * T_end), {b, T_end}};
    for (std::size_t r = 0; r < b; ++r) {
        std::copy(rows[r].begin(), rows[r].end(), out.data.begin() + std::ptrdiff_t(r * T_end));
        std::vector<std::int64_t>().swap(rows[r]);   // freed as the output fills
    }
    return out;
}

IndexArray generate(const nn::gpt::GPT& model, const IndexArray& idx, std::size_t max_new_tokens, float temperature,
                    std::optional<std::int64_t> top_k, const ShouldStop& should_stop, bool use_cache) {
    return use_cache ? generate(model, idx, max_new_tokens, temperature, top_k, should_stop)
                     : model.generate(idx, max_new_tokens, temperature, top_k, should_stop);
}

}  // namespace ct::decode
