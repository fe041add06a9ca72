#include "ctransformer/ops/layer_norm.hpp"

#include <cmath>

#include <vector>

#include "../parallel.hpp"
#include "../simd.hpp"
#include "ctransformer/autograd.hpp"
#include "ctransformer/error.hpp"

namespace ct {

namespace {

constexpr std::size_t kGrain = 16384;  // elements per thread

// With xhat = (x - mean) * rstd and dxhat = g * weight, per row of D elements:
//   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),
//   dweight += g * xhat, dbias += g.
// Rows are split over threads; dweight and dbias are summed per chunk, then the chunks are added.
struct LayerNormBackward : Node {
    Array mean, rstd;  // one per row, saved from the forward pass
    std::size_t rows, D;
    bool has_weight, has_bias;
    const char* name() const override { return "layer_norm"; }
    void backward(const Array& g) override {
        using simd::B;
        const Tensor& x = inputs[0];
        const float* w = has_weight ? inputs[1].data() : nullptr;
        const bool want_w = has_weight && inputs[1].requires_grad();
        const bool want_b = has_bias && inputs[has_weight ? 2 : 1].requires_grad();
        const GradBuffer gx = grad_buffer(x);
        const std::size_t chunks = parallel::chunks_for(rows, std::max<std::size_t>(1, kGrain / D));
        std::vector<float> partial((want_w || want_b) ? chunks * 2 * D : 0, 0.0f);
        parallel::parallel_chunks(rows, chunks, [&](std::size_t chunk, std::size_t r0, std::size_t r1) {
            float* pw = want_w ? partial.data() + chunk * 2 * D : nullptr;
            float* pb = want_b ? partial.data() + chunk * 2 * D + D : nullptr;
            for (std::size_t r = r0; r < r1; ++r) {
                const float* xr = x.data() + r * D;
                const float* gr = g.data() + r * D;
                const B mu(mean.data()[r]), rs(rstd.data()[r]);
                B s1(0.0f), s2(0.0f);
                simd::blocks(D, [&](std::size_t j, std::size_t c) {
                    const B xhat = (simd::load(xr + j, c) - mu) * rs;
                    const B gj = simd::load(gr + j, c);
                    const B dxhat = w ? gj * simd::load(w + j, c) : gj;
                    s1 += dxhat;
                    s2 += dxhat * xhat;
                    if (pw) simd::store(pw + j, simd::load(pw + j, c) + gj * xhat, c);
                    if (pb) simd::store(pb + j, simd::load(pb + j, c) + gj, c);
                });
                if (!gx) continue;
                const B m1(simd::hsum(s1) / float(D)), m2(simd::hsum(s2) / float(D));
                float* dx = gx.data + r * D;
                simd::blocks(D, [&](std::size_t j, std::size_t c) {
                    const B xhat = (simd::load(xr + j, c) - mu) * rs;
                    const B gj = simd::load(gr + j, c);
                    const B dxhat = w ? gj * simd::load(w + j, c) : gj;
                    B v = rs * (dxhat - m1 - xhat * m2);
                    if (gx.accumulate) v += simd::load(dx + j, c);
                    simd::store(dx + j, v, c);
                });
            }
        });
        // The parameters' gradients: the chunks' partial sums.
        auto reduce_into = [&](const Tensor& p, std::size_t offset) {
            GradBuffer gp = grad_buffer(p);
            for (std::size_t j = 0; j < D; ++j) {
                float v = gp.accumulate ? gp.data[j] : 0.0f;
                for (std::size_t c = 0; c < chunks; ++c) v += partial[c * 2 * D + offset + j];
                gp.data[j] = v;
            }
        };
        if (want_w) reduce_into(inputs[1], 0);
        if (want_b) reduce_into(inputs[has_weight ? 2 : 1], D);
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
    Tensor out(Array::from_shape(x.array().shape()));
    Array mean = Array::from_shape({rows}), rstd = Array::from_shape({rows});
    const float* w = weight ? weight->data() : nullptr;
    const float* bi = bias ? bias->data() : nullptr;
    parallel::parallel_for(rows, std::max<std::size_t>(1, kGrain / D), [&](std::size_t r0, std::size_t r1) {
        using simd::B;
        for (std::size_t r = r0; r < r1; ++r) {
            const float* xr = x.data() + r * D;
            const float mu = simd::sum(xr, D) / float(D);
            const B bmu(mu);
            B acc(0.0f);  // the variance from the centred values, as torch (two passes)
            simd::blocks(D, [&](std::size_t j, std::size_t c) {
                const B d = simd::load(xr + j, c, mu) - bmu;
                acc += d * d;
            });
            const float rs = 1.0f / std::sqrt(simd::hsum(acc) / float(D) + eps);
            mean.data()[r] = mu;
            rstd.data()[r] = rs;
            const B brs(rs);
            float* y = out.data() + r * D;
            simd::blocks(D, [&](std::size_t j, std::size_t c) {
                B v = (simd::load(xr + j, c) - bmu) * brs;
                if (w) v *= simd::load(w + j, c);
                if (bi) v += simd::load(bi + j, c);
                simd::store(y + j, v, c);
            });
        }
    });
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
