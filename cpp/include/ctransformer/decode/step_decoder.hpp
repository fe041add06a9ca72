// StepDecoder: the encoder-decoder Transformer driven one target position at a time, for a set of
// rows (hypotheses) that decoding strategies (greedy, beam search) extend, drop, reorder and repeat.
//
// The source is encoded once, when the decoder is made. Two implementations with one contract:
//   IncrementalDecoder (use_cache = true): key/value caches, one position's work per step;
//   FullPrefixDecoder (use_cache = false): the Annotated Transformer's loop, the whole prefix decoded each step.
// Both give the same logits up to float32 rounding (tests/decode/test_decode.py).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "ctransformer/nn/transformer.hpp"

namespace ct::decode {

class StepDecoder {
public:
    virtual ~StepDecoder() = default;
    virtual std::size_t rows() const = 0;
    // Target positions fed so far (the same for every row).
    virtual std::size_t length() const = 0;
    // Feeds ids[r] as row r's token at position length(); returns the logits (rows, n_trg_vocab) of that
    // position, i.e. the prediction of the next token. The target self-attention is causal (the no-peek
    // mask, no target pad mask: the Annotated Transformer's greedy_decode).
    virtual Tensor step(const std::vector<std::int64_t>& ids) = 0;
    // Keep rows[0], rows[1], ... (repeats allowed), in that order.
    virtual void select(const std::vector<std::size_t>& rows) = 0;
};

// Encodes src (b, ls) under src_mask ((b or 1, 1, ls), nonzero = may attend, or null) and returns a
// decoder with b rows and no target position yet. The model is used as it is: call eval() first,
// or dropout stays active. The model must outlive the decoder.
std::unique_ptr<StepDecoder> make_step_decoder(const nn::Transformer& model, const IndexArray& src,
                                               const Mask* src_mask, bool use_cache);

}  // namespace ct::decode
