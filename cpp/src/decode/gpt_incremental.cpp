#include "ctransformer/decode/gpt_incremental.hpp"

#include <algorithm>

#include "ctransformer/autograd.hpp"
#include "ctransformer/error.hpp"
#include "ctransformer/ops/elementwise.hpp"

namespace ct::decode {

GPTIncremental::GPTIncremental(const nn::gpt::GPT& model) : model_(model), cache_(model.num_layer) {}

void GPTIncremental::reset() {
    for (auto& kv : cache_) kv = KeyValue{};
    length_ = 0;
}

Tensor GPTIncremental::step(const IndexArray& ids) {
    if (ids.shape.size() == 2 && length_ > 0 && ids.shape[0] != rows_)
        throw ValueError("GPTIncremental.step: ids has " + std::to_string(ids.shape[0]) + " rows, the cache " +
                         std::to_string(rows_));
    NoGradGuard no_grad;
    Tensor x = model_.embed(ids, length_);   // checks the shape, the ids and length_ + s <= max_seq_len
    const std::size_t rows = x.size(0), s = x.size(1), E = model_.embed_dim;
    for (std::size_t l = 0; l < cache_.size(); ++l) {
        const nn::gpt::TransformerLayer& layer = (*model_.transformer)[l];
        // x_attn = attn(norm1(x)) + x, the attention reading every cached position.
        const Tensor xn = layer.norm1->forward(x);
        append_positions(cache_[l], layer.attn->k_layer->forward(xn), layer.attn->v_layer->forward(xn));
        Tensor x_attn = layer.attn->attend(xn, cache_[l].k, cache_[l].v, cache_[l].length).first;
        if (!layer.no_res) x_attn = add(x_attn, x);
        const Tensor x_ffn = layer.ffn->forward(layer.norm2->forward(x_attn));
        x = layer.no_res ? x_ffn : add(x_ffn, x_attn);
    }
    length_ += s;
    rows_ = rows;
    // Only the last position's logits: norm and head on (rows, E).
    Tensor last = Tensor::zeros({rows, E});
    for (std::size_t r = 0; r < rows; ++r) std::copy_n(x.data() + (r * s + s - 1) * E, E, last.data() + r * E);
    return model_.language_model_head->forward(model_.norm->forward(last));
}

}  // namespace ct::decode
