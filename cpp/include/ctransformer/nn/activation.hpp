// A feed-forward's non-linearity, as Hugging Face's ACT2FN names them (the maths: ops/activation.hpp):
//   ReLU ('relu'; both seeds), GELU ('gelu'; the exact erf form), GELUTanh ('gelu_new' or 'gelu_pytorch_tanh';
//   the tanh form, GPT-2's), SiLU ('silu' or 'swish'; x sigmoid(x), the opus-mt models')
#pragma once
#include <string>

#include "ctransformer/runtime/tensor.hpp"

namespace ct::nn {

enum class Activation { ReLU, GELU, GELUTanh, SiLU };

// The activation of a Hugging Face name; ValueError naming `fn` otherwise.
Activation parse_activation(const std::string& s, const char* fn);
std::string activation_name(Activation a);
// activation(z), recorded for backward like any op.
Tensor activate(Activation activation, const Tensor& z);

}  // namespace ct::nn
