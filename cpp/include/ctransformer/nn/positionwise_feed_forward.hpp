// PositionwiseFeedForward(d_in, d_hid, dropout) (jadore801120's SubLayers.py), and the pre-norm model's
// FullyConnectedOutput through SublayerOptions:
//   post-norm: LN(x + dropout(w_2(relu(w_1(x)))))
//   pre-norm:  x + dropout(w_2(relu(w_1(LN(x)))))
// relu is options.activation (Marian: silu or gelu), followed by options.activation_dropout when set.
#pragma once
#include <memory>

#include "ctransformer/nn/dropout.hpp"
#include "ctransformer/nn/layer_norm.hpp"
#include "ctransformer/nn/linear.hpp"
#include "ctransformer/nn/transformer_config.hpp"

namespace ct::nn {

class PositionwiseFeedForward : public Module {
public:
    PositionwiseFeedForward(std::size_t d_in, std::size_t d_hid, float dropout = 0.1f,
                            const SublayerOptions& options = {});
    Tensor forward(const Tensor& x) const;   // x (..., d_in)
    std::string type_name() const override { return "PositionwiseFeedForward"; }

    const std::size_t d_in, d_hid;
    const SublayerOptions options;
    // Post-norm names: w_1, w_2, layer_norm, dropout.
    // Pre-norm names: fc.0 (w_1), fc.2 (w_2), fc.3 (dropout), norm.
    // Marian: the layer names w_1, w_2 and layer_norm fc1, fc2 and final_layer_norm.
    std::shared_ptr<Linear> w_1, w_2;
    std::shared_ptr<LayerNorm> layer_norm;
    std::shared_ptr<Dropout> dropout, activation_dropout;   // activation_dropout: null unless options set it

private:
    Tensor activate(const Tensor& z) const;
};

}  // namespace ct::nn
