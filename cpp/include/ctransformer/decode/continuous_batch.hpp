// ContinuousBatch: the rows of a continuous batch, for a server's engine (serve/engine.hpp). Sequences (requests)
// join and leave between steps, each at its own position; every step feeds every live row one token, the linear
// layers as one product over all rows, each row's attention over its own sequence's keys/values. Two kinds:
// TranslationBatch (an encoder-decoder Transformer: greedy, GNMT's or transformers' beam search) and
// GenerationBatch (the GPT: greedy or sampled continuations of a prompt).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ctransformer/decode/beam_search.hpp"
#include "ctransformer/decode/hf_beam_search.hpp"

namespace ct::decode {

// What one request asks for. A translation reads beam_size, alpha, max_len, search and early_stopping; a
// generation reads max_len (here: the prompt and the new tokens together), temperature, top_k, top_p, seed, the
// logit adjustments and logprobs. A translation refuses the generation-only ones (check()).
struct SequenceOptions {
    enum class Search { Gnmt, HuggingFace };
    std::size_t beam_size = 1;       // 1: greedy decoding (the first maximum each step), unless search is HuggingFace
    double alpha = defaults::alpha;  // the length penalty: GNMT's alpha (beam_search.hpp), or Hugging Face's exponent
    std::size_t max_len = 0;         // target positions, the start symbol counted (a generation: prompt + new ids)
    Search search = Search::Gnmt;    // beam_search.hpp's rules, or hf_beam_search.hpp's (beam_size its num_beams)
    EarlyStopping early_stopping = EarlyStopping::False;   // Hugging Face's search only
    std::size_t n_best = 1;          // a beam's: the n best hypotheses it ends with (1 to beam_size), best first
    float temperature = 0.0f;        // a generation: 0 takes the first maximum, > 0 samples (sampling.hpp)
    std::size_t top_k = 0;           // a generation's sampling: the k most likely ids only (0: all)
    float top_p = 1.0f;              // a generation's sampling: the nucleus (sampling.hpp: sample_top_k_top_p)
    std::uint64_t seed = 0;          // a generation's sampling: its own generator, seeded so
    // A generation's logits before each choice, greedy or sampled (OpenAI's definitions; logit_adjustment.hpp):
    // logit_bias[id] is added to that id's logit, and each id the completion holds c > 0 times loses
    // presence_penalty + c * frequency_penalty.
    std::vector<std::pair<std::int64_t, float>> logit_bias;
    float presence_penalty = 0.0f, frequency_penalty = 0.0f;
    // A generation's log-probabilities (token_logprobs.hpp): each new id's, and the top_logprobs most likely ids'
    // with theirs, from the model's own logits (before the adjustments and the temperature).
    bool logprobs = false;
    std::size_t top_logprobs = 0;
};

class ContinuousBatch {
public:
    virtual ~ContinuousBatch() = default;

    struct Token {   // a sequence's new token, as it is chosen (greedy decoding and generation; never the end)
        std::uint64_t id;
        std::int64_t token;
        float logprob = 0.0f;                               // its log-probability (options.logprobs; else 0)
        std::vector<std::pair<std::int64_t, float>> top;    // the options.top_logprobs likeliest, most likely first
    };
    struct Finished {   // a sequence that ended: its output ids (no start, prompt or end symbol)
        std::uint64_t id;
        std::vector<std::int64_t> ids;
        double score = 0.0;   // a beam's score; 0 otherwise
        bool ended = false;   // it produced the end symbol (else it reached its length limit)
        // A beam with options.n_best > 1: the next best hypotheses' ids and scores, in order (as `ids`: no start or
        // end symbol).
        std::vector<std::vector<std::int64_t>> alternatives;
        std::vector<double> alternative_scores;
    };
    struct StepResult {
        std::vector<Token> tokens;
        std::vector<Finished> finished;
    };

    // Checks an input (a source with its end of sentence, or a prompt) and its options for this model; ValueError /
    // IndexError naming `what` otherwise. admit() checks each again.
    virtual void check(const std::vector<std::int64_t>& input, const SequenceOptions& options,
                       const std::string& what) const = 0;
    // Sequences ids[i] join with inputs[i]: their first pass (the encoder, or the prompt) runs over the newcomers
    // only, one pass per input length (no padding, so each is computed as it would be alone).
    virtual void admit(const std::vector<std::uint64_t>& ids, const std::vector<std::vector<std::int64_t>>& inputs,
                       const std::vector<SequenceOptions>& options) = 0;
    // One position over every live row; the sequences that end leave the batch.
    virtual StepResult step() = 0;
    // Drops sequence id (cancelled); false when it is not in the batch.
    virtual bool retire(std::uint64_t id) = 0;
    // Moves sequences, the last first, into `to` (a batch of the same kind over the same model; ValueError
    // otherwise) until `rows` rows or more have moved, or none is left; returns their ids. Each goes on as it would
    // have (its cache and search go with it): a server splits its batch this way over threads and merges it back.
    virtual std::vector<std::uint64_t> move_to(ContinuousBatch& to, std::size_t rows) = 0;
    virtual std::size_t rows() const = 0;   // live rows: the rows of the next step
    virtual std::size_t size() const = 0;   // sequences
    bool empty() const { return size() == 0; }
    // Rows a sequence with these options takes at most, for admission.
    static std::size_t rows_needed(const SequenceOptions& options) { return options.beam_size; }

protected:
    // retire()'s body for a batch kind that keeps its sequences (each with an `id`) in one vector of pointers.
    template <class Sequences>
    static bool erase_sequence(Sequences& sequences, std::uint64_t id) {
        for (auto it = sequences.begin(); it != sequences.end(); ++it)
            if ((*it)->id == id) {
                sequences.erase(it);
                return true;
            }
        return false;
    }
    // move_to()'s body, the same way: sequences report their rows().
    template <class Sequences>
    static std::vector<std::uint64_t> move_sequences(Sequences& from, Sequences& to, std::size_t rows) {
        std::vector<std::uint64_t> ids;
        for (std::size_t moved = 0; moved < rows && !from.empty(); from.pop_back()) {
            moved += from.back()->rows();
            ids.push_back(from.back()->id);
            to.push_back(std::move(from.back()));
        }
        return ids;
    }
};

}  // namespace ct::decode
