#include "ctransformer/nn/positionwise_feed_forward.hpp"

#include "ctransformer/error.hpp"
#include "ctransformer/nn/sequential.hpp"
#include "ctransformer/ops/elementwise.hpp"

namespace ct::nn {

PositionwiseFeedForward::PositionwiseFeedForward(std::size_t din, std::size_t dhid, float p, const SublayerOptions& o)
    : d_in(din), d_hid(dhid), options(o) {
    if (din == 0 || dhid == 0) throw ValueError("PositionwiseFeedForward: d_in and d_hid must be positive");
    w_1 = std::make_shared<Linear>(din, dhid);
    w_2 = std::make_shared<Linear>(dhid, din);
    layer_norm = std::make_shared<LayerNorm>(din, o.layer_norm_eps);
    dropout = std::make_shared<Dropout>(p);
    if (o.activation_dropout > 0.0f) activation_dropout = std::make_shared<Dropout>(o.activation_dropout);
    if (o.layout == Layout::Marian) {   // the layer names w_1, w_2 and layer_norm (fc1, fc2, final_layer_norm)
        register_module("dropout", dropout);
        if (activation_dropout) register_module("activation_dropout", activation_dropout);
    } else if (o.layout == Layout::PostNorm) {
        register_module("w_1", w_1);
        register_module("w_2", w_2);
        register_module("layer_norm", layer_norm);
        register_module("dropout", dropout);
    } else {   // pre-norm: fc = Sequential(Linear, ReLU, Linear, Dropout), then norm
        auto seq = std::make_shared<Sequential>();
        seq->add(0, w_1);
        seq->add(2, w_2);
        seq->add(3, dropout);
        register_module("fc", seq);
        register_module("norm", layer_norm);
    }
}

Tensor PositionwiseFeedForward::activate(const Tensor& z) const { return nn::activate(options.activation, z); }

Tensor PositionwiseFeedForward::forward(const Tensor& x) const {
    if (x.dim() < 1 || x.size(-1) != d_in)
        throw ValueError("PositionwiseFeedForward.forward: x must end in d_in = " + std::to_string(d_in) + ", got " +
                         shape_str(x.shape()));
    const Tensor h = options.norm_first ? layer_norm->forward(x) : x;
    Tensor hidden = activate(w_1->forward(h));
    if (activation_dropout) hidden = activation_dropout->forward(hidden);
    Tensor out = add(dropout->forward(w_2->forward(hidden)), x);
    return options.norm_first ? out : layer_norm->forward(out);
}

}  // namespace ct::nn
