// SequenceBatch: the rows of a continuous batch. Sequences (translation requests) join and leave between steps,
// each at its own position; every step feeds every live row one token, the linear layers as one product over
// all rows, each row's attention over its own sequence's keys/values (nn::Decoder::forward_sequences).
//
// A sequence holds the decoder's cache of its own: its self-attention keys/values (one row per live
// hypothesis: one for greedy, up to beam_size for beam search) and its source's cross-attention keys/values,
// projected once when it is admitted and read by each of its hypotheses through a row map. Beam search reorders
// a sequence's rows within its own cache; a sequence that ends or is retired takes its caches with it.
// Greedy and beam search choose as greedy_decode and beam_search do (decode/token_choice.hpp is shared), so a
// sequence decoded here gives what those give for its source alone. Its attention, layer norms and element-wise
// ops are computed as they would be for it alone (row by row, the same calls); its float32 and bf16 products
// are not (their kernels, and so their summation order, depend on how many rows a product has), so the ids
// agree wherever no step is decided within rounding. An int8 model's products are exact (int32 sums), so its
// sequences come out bit for bit as decoded alone.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "ctransformer/decode/beam_search.hpp"
#include "ctransformer/decode/hf_beam_search.hpp"
#include "ctransformer/decode/token_rules.hpp"
#include "ctransformer/nn/transformer.hpp"

namespace ct::decode {

struct SequenceOptions {
    enum class Search { Gnmt, HuggingFace };
    std::size_t beam_size = 1;       // 1: greedy decoding (the first maximum each step), unless search is HuggingFace
    double alpha = defaults::alpha;  // the length penalty: GNMT's alpha (beam_search.hpp), or Hugging Face's exponent
    std::size_t max_len = 0;         // target positions, the start symbol counted: at least 2
    Search search = Search::Gnmt;    // beam_search.hpp's rules, or hf_beam_search.hpp's (beam_size its num_beams)
    EarlyStopping early_stopping = EarlyStopping::False;   // Hugging Face's search only
};

class SequenceBatch {
public:
    // The model must be in eval mode and outlive the batch. start_symbol begins every target; end_symbol ends
    // one; rules as greedy_decode's and beam_search's.
    SequenceBatch(const nn::Transformer& model, std::int64_t start_symbol, std::int64_t end_symbol, TokenRules rules = {});
    ~SequenceBatch();
    SequenceBatch(const SequenceBatch&) = delete;
    SequenceBatch& operator=(const SequenceBatch&) = delete;

    // Checks a source (ids, end of sentence included) and its options for this model; ValueError / IndexError
    // naming `what` otherwise. admit() checks each again.
    void check(const std::vector<std::int64_t>& source, const SequenceOptions& options, const std::string& what) const;
    // Sequences ids[i] join with sources[i]: one encoder pass per source length among them (no padding, so each
    // source is encoded as it would be alone), and each source's cross-attention keys/values projected once.
    void admit(const std::vector<std::uint64_t>& ids, const std::vector<std::vector<std::int64_t>>& sources,
               const std::vector<SequenceOptions>& options);

    struct Token {   // a greedy sequence's new token (not its end)
        std::uint64_t id;
        std::int64_t token;
    };
    struct Finished {   // a sequence that ended, with its best hypothesis (start symbol first)
        std::uint64_t id;
        Hypothesis best;
    };
    struct StepResult {
        std::vector<Token> tokens;
        std::vector<Finished> finished;
    };
    // One decoder position over every live row; the sequences that end leave the batch.
    StepResult step();
    // Drops sequence id (cancelled); false when it is not in the batch.
    bool retire(std::uint64_t id);

    std::size_t rows() const;        // live rows: the decoder rows of the next step
    std::size_t size() const;        // sequences
    bool empty() const { return size() == 0; }
    // Rows a sequence with these options takes at most (beam_size), for admission.
    static std::size_t rows_needed(const SequenceOptions& options) { return options.beam_size; }

private:
    struct Sequence;
    const nn::Transformer& model_;
    const std::int64_t start_symbol_, end_symbol_;
    const TokenRules rules_;
    std::vector<std::unique_ptr<Sequence>> sequences_;
};

}  // namespace ct::decode
