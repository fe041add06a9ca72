// FFN(embed_dim, feedforward_dim, dropout, activation): the GPT's position-wise feed-forward network,
// drop(fc2(activation(fc1(x)))); the seed's activation is the tanh form of GELU.
#pragma once
#include <memory>

#include "ctransformer/nn/activation.hpp"
#include "ctransformer/nn/dropout.hpp"
#include "ctransformer/nn/linear.hpp"
#include "ctransformer/nn/module.hpp"

namespace ct::nn::gpt {

class FFN : public Module {
public:
    FFN(std::size_t embed_dim, std::size_t feedforward_dim, float dropout,
        Activation activation = Activation::GELUTanh);
    Tensor forward(const Tensor& x) const;
    std::string type_name() const override { return "FFN"; }

    std::shared_ptr<Linear> fc1, fc2;
    std::shared_ptr<Dropout> drop;
    const Activation activation;
};

}  // namespace ct::nn::gpt
