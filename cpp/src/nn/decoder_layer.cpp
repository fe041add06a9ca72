#include "ctransformer/nn/decoder_layer.hpp"

namespace ct::nn {

DecoderLayer::DecoderLayer(std::size_t d_model, std::size_t d_inner, std::size_t n_head, std::size_t d_k,
                           std::size_t d_v, float dropout, const SublayerOptions& o) {
    slf_attn_ = std::make_shared<MultiHeadAttention>(n_head, d_model, d_k, d_v, dropout, o);
    enc_attn_ = std::make_shared<MultiHeadAttention>(n_head, d_model, d_k, d_v, dropout, o);
    pos_ffn_ = std::make_shared<PositionwiseFeedForward>(d_model, d_inner, dropout, o);
    if (o.layout == Layout::Marian) {   // MarianDecoderLayer's names and order
        register_module("self_attn", slf_attn_);
        register_module("self_attn_layer_norm", slf_attn_->layer_norm);
        register_module("encoder_attn", enc_attn_);
        register_module("encoder_attn_layer_norm", enc_attn_->layer_norm);
        register_module("fc1", pos_ffn_->w_1);
        register_module("fc2", pos_ffn_->w_2);
        register_module("final_layer_norm", pos_ffn_->layer_norm);
        register_module("ffn", pos_ffn_);   // parameter-free here: its dropouts
        return;
    }
    const bool post_norm_names = o.layout == Layout::PostNorm;
    register_module(post_norm_names ? "slf_attn" : "mhl", slf_attn_);   // "mhl": the pre-norm model's spelling
    register_module(post_norm_names ? "enc_attn" : "mh2", enc_attn_);
    register_module(post_norm_names ? "pos_ffn" : "fc", pos_ffn_);
}

std::tuple<Tensor, Tensor, Tensor> DecoderLayer::forward(const Tensor& dec_input, const Tensor& enc_output,
                                                         const Mask* slf_attn_mask,
                                                         const Mask* dec_enc_attn_mask) const {
    return run(dec_input, &enc_output, slf_attn_mask, dec_enc_attn_mask, nullptr);
}

std::tuple<Tensor, Tensor, Tensor> DecoderLayer::forward(const Tensor& dec_input, Cache& cache, const Mask* slf_attn_mask,
                                                         const Mask* dec_enc_attn_mask) const {
    return run(dec_input, nullptr, slf_attn_mask, dec_enc_attn_mask, &cache);
}

std::tuple<Tensor, Tensor, Tensor> DecoderLayer::run(const Tensor& dec_input, const Tensor* enc_output,
                                                     const Mask* slf_attn_mask, const Mask* dec_enc_attn_mask,
                                                     Cache* cache) const {
    auto [out, slf] = slf_attn_->forward(dec_input, dec_input, dec_input, slf_attn_mask, cache ? &cache->self : nullptr);
    // The encoder output's keys/values are the same at every target position: a cache has them already.
    auto [out2, enc] = cache ? enc_attn_->attend(out, cache->cross, dec_enc_attn_mask)
                             : enc_attn_->forward(out, *enc_output, *enc_output, dec_enc_attn_mask);
    return {pos_ffn_->forward(out2), slf, enc};
}

Tensor DecoderLayer::forward_sequences(const Tensor& dec_input, const std::vector<Cache*>& caches,
                                       const std::vector<std::size_t>& offsets) const {
    std::vector<KeyValue*> self(caches.size()), cross(caches.size());
    for (std::size_t s = 0; s < caches.size(); ++s) {
        self[s] = &caches[s]->self;
        cross[s] = &caches[s]->cross;
    }
    const Tensor out = slf_attn_->forward_sequences(dec_input, self, offsets, true);
    return pos_ffn_->forward(enc_attn_->forward_sequences(out, cross, offsets, false));
}

DecoderLayer::Cache DecoderLayer::start_cache(const Tensor& enc_output) const {
    return {KeyValue{}, enc_attn_->project_kv(enc_output)};
}

}  // namespace ct::nn
