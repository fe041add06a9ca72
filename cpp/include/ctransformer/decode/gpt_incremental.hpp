// GPTIncremental: the GPT fed a few positions at a time, with each layer's self-attention
// keys/values cached. It holds the model's Cache (nn/gpt/gpt.hpp), and step(ids) runs the model's own
// layers with it (GPT::hidden): ids sit at positions length() .. length() + s - 1, each layer appends
// their keys/values and attends over every cached position (the causal mask puts the s queries at
// the last s positions); then the final norm and head on the last position (GPT::last_logits).
#pragma once
#include <vector>

#include "ctransformer/decode/kv_cache.hpp"
#include "ctransformer/nn/gpt/gpt.hpp"

namespace ct::decode {

class GPTIncremental {
public:
    // The model must outlive this object. It is used as it is: call eval() first, or dropout stays active.
    explicit GPTIncremental(const nn::gpt::GPT& model);
    std::size_t length() const { return cache_.length; }   // positions held (at most max_seq_len)
    // ids (rows, s): the next s tokens of each row, s >= 1, length() + s <= max_seq_len; the rows must
    // stay the same between resets. Returns the logits (rows, vocab_size) of the last of them.
    Tensor step(const IndexArray& ids);
    void reset();   // forget every position
    // Room for this many positions (at most max_seq_len) in every layer's cache at its first step and after a
    // reset, so a caller that knows the length it will reach (generate: prompt and new tokens) never has the
    // caches grow by copying. capacity(): the positions the caches have room for now.
    void reserve(std::size_t positions);
    std::size_t capacity() const { return cache_.layers.empty() ? 0 : cache_.layers.front().capacity(); }
    const KeyValue& cache(std::size_t layer) const { return cache_.layers.at(layer); }

private:
    const nn::gpt::GPT& model_;
    nn::gpt::GPT::Cache cache_;   // per layer, (rows, capacity, embed_dim) each
    std::size_t rows_ = 0;
    std::size_t reserve_ = 0;
};

}  // namespace ct::decode
