#include "ctransformer/nn/gpt/ffn.hpp"


namespace ct::nn::gpt {

FFN::FFN(std::size_t embed_dim, std::size_t feedforward_dim, float dropout, Activation act) : activation(act) {
    fc1 = register_module("fc1", std::make_shared<Linear>(embed_dim, feedforward_dim));
    fc2 = register_module("fc2", std::make_shared<Linear>(feedforward_dim, embed_dim));
    drop = register_module("drop", std::make_shared<Dropout>(dropout));
}

Tensor FFN::forward(const Tensor& x) const {
    return drop->forward(fc2->forward(activate(activation, fc1->forward(x))));
}

}  // namespace ct::nn::gpt
