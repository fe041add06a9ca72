// DecoderLayer (jadore801120's Layers.py): masked self-attention, encoder-decoder attention with
// K = V = the encoder output, then the feed-forward. The pre-norm model names them mhl, mh2 and fc.
//
// Cached decoding runs the same forward with a Cache: the self-attention keeps the keys/values of
// every target position fed so far, and the encoder-decoder attention reads the encoder output's,
// projected once per source (start_cache).
#pragma once
#include <memory>
#include <tuple>

#include "ctransformer/nn/kv_cache.hpp"
#include "ctransformer/nn/multi_head_attention.hpp"
#include "ctransformer/nn/positionwise_feed_forward.hpp"

namespace ct::nn {

class DecoderLayer : public Module {
public:
    // One layer's state for cached decoding.
    struct Cache {
        KeyValue self;    // the self-attention's keys/values of the target positions fed so far
        KeyValue cross;   // the encoder-decoder attention's of the encoder output (start_cache)
    };

    DecoderLayer(std::size_t d_model, std::size_t d_inner, std::size_t n_head, std::size_t d_k, std::size_t d_v,
                 float dropout = 0.1f, const SublayerOptions& options = {});
    // Returns (dec_output, dec_slf_attn, dec_enc_attn).
    std::tuple<Tensor, Tensor, Tensor> forward(const Tensor& dec_input, const Tensor& enc_output,
                                               const Mask* slf_attn_mask = nullptr,
                                               const Mask* dec_enc_attn_mask = nullptr) const;
    // The same with a cache (start_cache): dec_input holds the positions after the cache.self.length
    // held; their keys/values are appended and their queries attend over every position held
    // (slf_attn_mask, if any, is (b or 1, len, cache.self.length + len)); the encoder-decoder
    // attention reads cache.cross.
    std::tuple<Tensor, Tensor, Tensor> forward(const Tensor& dec_input, Cache& cache, const Mask* slf_attn_mask = nullptr,
                                               const Mask* dec_enc_attn_mask = nullptr) const;
    // A cache holding no target position yet, with the encoder-decoder attention's keys/values of
    // enc_output (b, ls, d_model).
    Cache start_cache(const Tensor& enc_output) const;
    // One position for sequences of their own lengths (a continuous batch): dec_input (rows, 1, d_model),
    // sequence s owning rows [offsets[s], offsets[s + 1]) and caches[s]; each sequence's self-attention appends
    // to and reads its own keys/values, its cross-attention reads its own source's. The products run once over
    // every row. Returns the output (rows, 1, d_model).
    Tensor forward_sequences(const Tensor& dec_input, const std::vector<Cache*>& caches,
                             const std::vector<std::size_t>& offsets) const;
    std::string type_name() const override { return "DecoderLayer"; }

    const std::shared_ptr<MultiHeadAttention>& slf_attn() const { return slf_attn_; }
    const std::shared_ptr<MultiHeadAttention>& enc_attn() const { return enc_attn_; }
    const std::shared_ptr<PositionwiseFeedForward>& pos_ffn() const { return pos_ffn_; }

private:
    // Both forwards: enc_output is read without a cache, cache->cross with one.
    std::tuple<Tensor, Tensor, Tensor> run(const Tensor& dec_input, const Tensor* enc_output, const Mask* slf_attn_mask,
                                           const Mask* dec_enc_attn_mask, Cache* cache) const;

    std::shared_ptr<MultiHeadAttention> slf_attn_, enc_attn_;
    std::shared_ptr<PositionwiseFeedForward> pos_ffn_;
};

}  // namespace ct::nn
