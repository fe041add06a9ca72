#include "ctransformer/decode/gpt_incremental.hpp"

#include <algorithm>

#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/error.hpp"

namespace ct::decode {

GPTIncremental::GPTIncremental(const nn::gpt::GPT& model) : model_(model), cache_(model.start_cache()) {}

void GPTIncremental::reset() {
    cache_ = model_.start_cache();
    reserve(reserve_);
}

void GPTIncremental::reserve(std::size_t positions) {
    reserve_ = std::min(positions, model_.max_seq_len);
    for (KeyValue& layer : cache_.layers) layer.reserve = positions;
}

Tensor GPTIncremental::step(const IndexArray& ids) {
    if (ids.shape.size() == 2 && cache_.length > 0 && ids.shape[0] != rows_)
        throw ValueError("GPTIncremental.step: ids has " + std::to_string(ids.shape[0]) + " rows, the cache " +
                         std::to_string(rows_));
    NoGradGuard no_grad;
    // The model's own layers with the cache; it checks the ids and length() + s <= max_seq_len.
    const Tensor x = model_.hidden(ids, &cache_);
    rows_ = x.size(0);
    return model_.last_logits(x);
}

}  // namespace ct::decode
