// TranslationBatch: a continuous batch (continuous_batch.hpp) of an encoder-decoder Transformer's translations.
//
// A sequence holds the decoder's cache of its own: its self-attention keys/values (one row per live
// hypothesis: one for greedy, up to beam_size for beam search) and its source's cross-attention keys/values,
// projected once when it is admitted and read by each of its hypotheses through a row map
// (nn::Decoder::forward_sequences). Beam search reorders a sequence's rows within its own cache; a sequence that
// ends or is retired takes its caches with it.
// Greedy and beam search choose as greedy_decode, beam_search and hf_beam_search do (decode/token_choice.hpp and
// decode/hf_beam.hpp are shared), so a sequence decoded here gives what those give for its source alone. Its
// attention, layer norms and element-wise ops are computed as they would be for it alone (row by row, the same
// calls); its float32 and bf16 products are not (their kernels, and so their summation order, depend on how many
// rows a product has), so the ids agree wherever no step is decided within rounding. An int8 model's products are
// exact (int32 sums), so its sequences come out bit for bit as decoded alone.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "ctransformer/decode/continuous_batch.hpp"
#include "ctransformer/decode/token_rules.hpp"
#include "ctransformer/nn/transformer.hpp"

namespace ct::decode {

class TranslationBatch : public ContinuousBatch {
public:
    // The model must be in eval mode and outlive the batch. start_symbol begins every target; end_symbol ends
    // one; rules as greedy_decode's and beam_search's.
    TranslationBatch(const nn::Transformer& model, std::int64_t start_symbol, std::int64_t end_symbol,
                     TokenRules rules = {});
    ~TranslationBatch() override;
    TranslationBatch(const TranslationBatch&) = delete;
    TranslationBatch& operator=(const TranslationBatch&) = delete;

    // A source: its ids, end of sentence included.
    void check(const std::vector<std::int64_t>& source, const SequenceOptions& options,
               const std::string& what) const override;
    // One encoder pass per source length among the newcomers; each source's cross-attention keys/values projected
    // once.
    void admit(const std::vector<std::uint64_t>& ids, const std::vector<std::vector<std::int64_t>>& sources,
               const std::vector<SequenceOptions>& options) override;
    StepResult step() override;
    bool retire(std::uint64_t id) override;
    std::vector<std::uint64_t> move_to(ContinuousBatch& to, std::size_t rows) override;
    std::size_t rows() const override;
    std::size_t size() const override;

private:
    struct Sequence;
    const nn::Transformer& model_;
    const std::int64_t start_symbol_, end_symbol_;
    const TokenRules rules_;
    std::vector<std::unique_ptr<Sequence>> sequences_;
};

}  // namespace ct::decode
