#include "ctransformer/nn/activation.hpp"

#include "ctransformer/error.hpp"
#include "ctransformer/ops/activation.hpp"

namespace ct::nn {

// Hugging Face's ACT2FN names; 'swish' is 'silu', 'gelu_pytorch_tanh' is 'gelu_new' (the same formula).
Activation parse_activation(const std::string& s, const char* fn) {
    if (s == "relu") return Activation::ReLU;
    if (s == "gelu") return Activation::GELU;
    if (s == "gelu_new" || s == "gelu_pytorch_tanh") return Activation::GELUTanh;
    if (s == "silu" || s == "swish") return Activation::SiLU;
    throw ValueError(std::string(fn) + ": activation must be 'relu', 'gelu', 'gelu_new' (the tanh form) or 'silu' "
                     "('swish'), got '" + s + "'");
}

std::string activation_name(Activation a) {
    switch (a) {
        case Activation::ReLU: return "relu";
        case Activation::GELU: return "gelu";
        case Activation::GELUTanh: return "gelu_new";
        case Activation::SiLU: return "silu";
    }
    return "relu";
}

Tensor activate(Activation activation, const Tensor& z) {
    switch (activation) {
        case Activation::GELU: return gelu_erf(z);
        case Activation::GELUTanh: return gelu(z);
        case Activation::SiLU: return silu(z);
        case Activation::ReLU: break;
    }
    return relu(z);
}

}  // namespace ct::nn
