// What GPT-2 configurations vary beyond the seed's GPT, under Hugging Face's GPT2Config names; each default is the
// seed's (and GPT-2's). GPT(..., options) builds the model they describe, for training and every decoding path.
#pragma once
#include "ctransformer/nn/activation.hpp"

namespace ct::nn::gpt {

struct Options {
    float layer_norm_epsilon = 1e-5f;               // every LayerNorm's eps (the layers' two and the final one)
    Activation activation = Activation::GELUTanh;   // the feed-forward's: fc2(activation(fc1(x)))
    bool scale_attn_weights = true;                 // the scores q k^T divided by sqrt(head size)
    bool scale_attn_by_inverse_layer_idx = false;   // ... and by layer l's l + 1 (counted from 0)
    bool tie_word_embeddings = true;                // the head's weight is the token embedding's (one tensor)
};

}  // namespace ct::nn::gpt
