// GenerationBatch: a continuous batch (continuous_batch.hpp) of the GPT's continuations of prompts.
//
// A sequence holds the GPT's key/value cache of its own and a generator of its own (seeded per request), and
// continues as decode::generate continues that prompt alone: the prompt cropped to its last max_seq_len ids fills
// the cache; each step feeds the last id at the next position, or, once the window is full, rebuilds the cache from
// the cropped context (learned positions: no cached key survives a crop). Each new id is the first maximum of the
// logits (temperature 0) or a draw of sample_top_k from the sequence's generator, so a request with seed S draws
// what generate draws after manual_seed(S). As in TranslationBatch, an int8 model's sequences come out bit for bit
// as generated alone; float32 and bf16 ones up to the products' summation order.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "ctransformer/decode/continuous_batch.hpp"
#include "ctransformer/nn/gpt/gpt.hpp"

namespace ct::decode {

class GenerationBatch : public ContinuousBatch {
public:
    // The model must be in eval mode and outlive the batch. A sequence ends at end_symbol when it has one, else
    // at its length (options.max_len: the prompt and the new ids).
    GenerationBatch(const nn::gpt::GPT& model, std::optional<std::int64_t> end_symbol = std::nullopt);
    ~GenerationBatch() override;
    GenerationBatch(const GenerationBatch&) = delete;
    GenerationBatch& operator=(const GenerationBatch&) = delete;

    // A prompt: at least one id.
    void check(const std::vector<std::int64_t>& prompt, const SequenceOptions& options,
               const std::string& what) const override;
    // One pass per cropped prompt length among the newcomers fills their caches; their first ids are chosen at the
    // next step.
    void admit(const std::vector<std::uint64_t>& ids, const std::vector<std::vector<std::int64_t>>& prompts,
               const std::vector<SequenceOptions>& options) override;
    StepResult step() override;
    bool retire(std::uint64_t id) override;
    std::vector<std::uint64_t> move_to(ContinuousBatch& to, std::size_t rows) override;
    std::size_t rows() const override;
    std::size_t size() const override;

private:
    struct Sequence;
    const nn::gpt::GPT& model_;
    const std::optional<std::int64_t> end_symbol_;
    std::vector<std::unique_ptr<Sequence>> sequences_;
};

}  // namespace ct::decode
