// GPT(vocab_size, max_seq_len, num_layer, embed_dim, num_head, feedforward_dim, dropout, no_res,
// no_pos, options): the GPT reference's decoder-only language model, and GPT-2's variants of it
// (options: LayerNorm eps, the feed-forward's activation, the scores' scaling, an untied head;
// gpt/options.hpp).
//
//   x = drop(word_token_embedding(idx) + word_pos_embedding(0..t-1))   (no position term when no_pos)
//   x, attn_l = transformer[l](x)                                       for each layer l
//   logits = language_model_head(norm(x))                               (b, t, vocab_size)
//   loss = cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index = 0)
//
// language_model_head has no bias and its weight IS word_token_embedding's weight (one Tensor),
// unless options.tie_word_embeddings is false (then a weight of its own, drawn as a Linear's).
// init_weights() follows the seed: every Linear and Embedding weight ~ N(0, 0.02), biases 0, then
// every parameter whose name ends in "proj_layer.weight" (each attention's output projection)
// ~ N(0, 0.02 / sqrt(2 num_layer)); draws come from the library generator (manual_seed).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ctransformer/decode/should_stop.hpp"
#include "ctransformer/nn/dropout.hpp"
#include "ctransformer/nn/embedding.hpp"
#include "ctransformer/nn/gpt/options.hpp"
#include "ctransformer/nn/gpt/transformer_layer.hpp"
#include "ctransformer/nn/kv_cache.hpp"
#include "ctransformer/nn/layer_norm.hpp"
#include "ctransformer/nn/linear.hpp"

namespace ct::nn::gpt {

class GPT : public Module {
public:
    static constexpr std::int64_t ignore_index = 0;  // the GPT reference's cross_entropy(..., ignore_index=0)

    GPT(std::size_t vocab_size, std::size_t max_seq_len, std::size_t num_layer, std::size_t embed_dim,
        std::size_t num_head, std::size_t feedforward_dim, float dropout, bool no_res = false, bool no_pos = false,
        const Options& options = {});

    void init_weights();

    struct Output {
        Tensor logits;                          // (b, t, vocab_size)
        std::optional<Tensor> loss;             // a 0-dim tensor when targets were given
        std::vector<Tensor> attention_weights;  // one (b, num_head, t, t) per layer
    };
    // idx (b, t) token ids ("word_idx" in the seed), 1 <= t <= max_seq_len; targets, when given,
    // the same shape, 0 for positions that do not count.
    Output forward(const IndexArray& idx, const IndexArray* targets = nullptr) const;

    // The input of the first layer for idx placed at positions start_pos .. start_pos + t - 1.
    Tensor embed(const IndexArray& idx, std::size_t start_pos = 0) const;

    // Cached decoding's state (decode/gpt_incremental.hpp): each layer's keys/values, and the
    // positions fed so far.
    struct Cache {
        std::vector<KeyValue> layers;
        std::size_t length = 0;
    };
    Cache start_cache() const { return Cache{std::vector<KeyValue>(num_layer), 0}; }

    // The last layer's output (b, t, embed_dim), before the final norm: forward() without the head.
    // With a cache, idx holds positions cache->length .. cache->length + t - 1 (up to max_seq_len):
    // each layer appends their keys/values and attends over every position held; the cache then
    // holds t more. attention_weights, when given, receives each layer's.
    Tensor hidden(const IndexArray& idx, Cache* cache = nullptr, std::vector<Tensor>* attention_weights = nullptr) const;
    // One position for sequences of their own lengths (a continuous batch; decode/generation_batch.hpp): ids[r]
    // is row r's token; sequence s owns rows [offsets[s], offsets[s + 1]) and caches[s], whose length is the
    // position its rows are fed at (below max_seq_len). Every cache then holds one more position. Returns the
    // logits (rows, vocab_size).
    Tensor logits_sequences(const std::vector<std::int64_t>& ids, const std::vector<Cache*>& caches,
                            const std::vector<std::size_t>& offsets) const;
    // The logits (b, vocab_size) of the last position of hidden (b, t, embed_dim): the final norm and
    // the head on that position only (what generation samples from).
    Tensor last_logits(const Tensor& hidden) const;

    struct ParamGroup {
        std::vector<std::string> names;
        std::vector<Tensor> params;
        float weight_decay;
    };
    // The seed's two groups: Linear weights decay; biases, LayerNorm and Embedding weights do not;
    // the tied head weight is counted once, as word_token_embedding.weight (no decay); an untied
    // one is a Linear weight (decays). Each group is sorted by name.
    std::vector<ParamGroup> configure_optimizers(float weight_decay) const;

    // Appends max_new_tokens ids to idx (b, t), each sampled from
    // softmax(top_k filtered logits[:, -1] / temperature), the context cropped to its last
    // max_seq_len ids. Runs without recording a graph; draws from the library generator.
    // Returns (b, t + max_new_tokens). The whole context is re-run for every token;
    // ct::decode::generate (decode/gpt_generate.hpp) returns the same ids with a key/value cache.
    // should_stop is called before each token (decode/should_stop.hpp).
    IndexArray generate(const IndexArray& idx, std::size_t max_new_tokens, float temperature = 1.0f,
                        std::optional<std::int64_t> top_k = std::nullopt,
                        const decode::ShouldStop& should_stop = {}) const;

    std::string type_name() const override { return "GPT"; }

    std::shared_ptr<Embedding> word_token_embedding, word_pos_embedding;
    std::shared_ptr<Dropout> drop;
    std::shared_ptr<ModuleList<TransformerLayer>> transformer;
    std::shared_ptr<LayerNorm> norm;
    std::shared_ptr<Linear> language_model_head;

    const std::size_t vocab_size, max_seq_len, num_layer, embed_dim, num_head, feedforward_dim;
    const float dropout;
    const bool no_res, no_pos;
    const Options options;

private:
    void check_ids(const IndexArray& ids, const char* fn, const char* arg) const;
    void check_idx(const IndexArray& idx, const char* fn, const char* arg, std::size_t start_pos, bool limit_len) const;
};

}  // namespace ct::nn::gpt
