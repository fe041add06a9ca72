// GPTIncremental: seed 004's GPT fed a few positions at a time, with each layer's self-attention
// keys/values cached. step(ids) embeds ids at positions length() .. length() + s - 1 (GPT::embed with
// a start position), and in each pre-norm layer appends their keys/values (k_layer / v_layer of the
// normalised input) to the cache and attends over every cached position (SelfAttention::attend, whose
// causal mask puts the s queries at the last s positions); the rest works position by position.
#pragma once
#include <vector>

#include "ctransformer/decode/kv_cache.hpp"
#include "ctransformer/nn/gpt/gpt.hpp"

namespace ct::decode {

class GPTIncremental {
public:
    // The model must outlive this object. It is used as it is: call eval() first, or dropout stays active.
    explicit GPTIncremental(const nn::gpt::GPT& model);
    std::size_t length() const { return length_; }   // positions held (at most max_seq_len)
    // ids (rows, s): the next s tokens of each row, s >= 1, length() + s <= max_seq_len; the rows must
    // stay the same between resets. Returns the logits (rows, vocab_size) of the last of them.
    Tensor step(const IndexArray& ids);
    void reset();   // forget every position
    const KeyValue& cache(std::size_t layer) const { return cache_.at(layer); }

private:
    const nn::gpt::GPT& model_;
    std::vector<KeyValue> cache_;   // per layer, (rows, capacity, embed_dim) each
    std::size_t length_ = 0, rows_ = 0;
};

}  // namespace ct::decode
