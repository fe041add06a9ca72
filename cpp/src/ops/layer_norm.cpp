#include "ctransformer/ops/layer_norm.hpp"

#include <cmath>

#include "ctransformer/autograd.hpp"
#include "ctransformer/error.hpp"

namespace ct {

namespace {

// With xhat = (x - mean) * rstd and dxhat = g * weight, per row of D elements:
//   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),
//   dweight += g * xhat, dbias += g.
struct LayerNormBackward : Node {
    Array mean, rstd;  // one per row, saved from the forward pass
    std::size_t rows, D;
    bool has_weight, has_bias;
    const char* name() const override { return "layer_norm"; }
    void backward(const Array& g) override {
        const Tensor& x = inputs[0];
        const float* w = has_weight ? inputs[1].data() : nullptr;
        Array* gx = grad_slot(x);
        Array* gw = has_weight ? grad_slot(inputs[1]) : nullptr;
        Array* gb = has_bias ? grad_slot(inputs[has_weight ? 2 : 1]) : nullptr;
        for (std::size_t r = 0; r < rows; ++r) {
            const float* xr = x.data() + r * D;
            const float* gr = g.data() + r * D;
            const float mu = mean.data()[r], rs = rstd.data()[r];
            double sum_dxhat = 0.0, sum_dxhat_xhat = 0.0;
            for (std::size_t j = 0; j < D; ++j) {
                const float xhat = (xr[j] - mu) * rs;
                const float dxhat = w ? gr[j] * w[j] : gr[j];
                sum_dxhat += dxhat;
                sum_dxhat_xhat += double(dxhat) * xhat;
                if (gw) gw->data()[j] += gr[j] * xhat;
                if (gb) gb->data()[j] += gr[j];
            }
            if (!gx) continue;
            const float m1 = float(sum_dxhat / double(D)), m2 = float(sum_dxhat_xhat / double(D));
            float* dx = gx->data() + r * D;
            for (std::size_t j = 0; j < D; ++j) {
                const float xhat = (xr[j] - mu) * rs;
                const float dxhat = w ? gr[j] * w[j] : gr[j];
                dx[j] += rs * (dxhat - m1 - xhat * m2);
            }
        }
    }
    void release_saved() override { mean = Array(); rstd = Array(); }
};

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor* weight, const Tensor* bias, float eps) {
    if (x.dim() < 1 || x.size(-1) == 0)
        throw ValueError("layer_norm: input needs a non-empty last dimension, got shape " + shape_str(x.shape()));
    const std::size_t D = x.size(-1), rows = x.numel() / D;
    for (const Tensor* p : {weight, bias})
        if (p && (p->dim() != 1 || p->size(0) != D))
            throw ValueError(std::string("layer_norm: ") + (p == weight ? "weight" : "bias") + " must have shape (" +
                             std::to_string(D) + ",) to match the input's last dimension, got " +
                             shape_str(p->shape()));
    if (!(eps >= 0.0f)) throw ValueError("layer_norm: eps must be >= 0, got " + std::to_string(eps));
    Tensor out(Array::from_shape(x.shape()));
    Array mean = Array::from_shape({rows}), rstd = Array::from_shape({rows});
    for (std::size_t r = 0; r < rows; ++r) {
        const float* xr = x.data() + r * D;
        double s = 0.0;
        for (std::size_t j = 0; j < D; ++j) s += xr[j];
        const double mu = s / double(D);
        double v = 0.0;
        for (std::size_t j = 0; j < D; ++j) v += (xr[j] - mu) * (xr[j] - mu);
        const float rs = float(1.0 / std::sqrt(v / double(D) + double(eps)));
        mean.data()[r] = float(mu);
        rstd.data()[r] = rs;
        float* y = out.data() + r * D;
        for (std::size_t j = 0; j < D; ++j) {
            const float xhat = (xr[j] - float(mu)) * rs;
            y[j] = xhat * (weight ? weight->data()[j] : 1.0f) + (bias ? bias->data()[j] : 0.0f);
        }
    }
    if (needs_grad({&x, weight, bias})) {
        auto node = std::make_shared<LayerNormBackward>();
        node->mean = std::move(mean);
        node->rstd = std::move(rstd);
        node->rows = rows;
        node->D = D;
        node->has_weight = weight != nullptr;
        node->has_bias = bias != nullptr;
        attach(out, node, {&x, weight, bias});
    }
    return out;
}

}  // namespace ct
