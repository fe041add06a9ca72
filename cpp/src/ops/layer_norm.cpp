#include "ctransformer/ops/layer_norm.hpp"

#include <algorithm>
#include <vector>

#include "../runtime/parallel.hpp"
#include "../kernels/simd/layer_norm.hpp"
#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/error.hpp"

namespace ct {

namespace {

constexpr std::size_t kGrain = 16384;  // elements per thread

// With xhat = (x - mean) * rstd and dxhat = g * weight, per row of D elements:
//   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),
//   dweight += g * xhat, dbias += g.
// Rows are split over threads; dweight and dbias are summed per chunk, then the chunks are added. Each row
// takes the vector loop of the kernel level (kernels/simd/layer_norm.cpp).
struct LayerNormBackward : Node {
    Array mean, rstd;  // one per row, saved from the forward pass
    std::size_t rows, D;
    bool has_weight, has_bias;
    const char* name() const override { return "layer_norm"; }
    void backward(const Array& g) override {
        const Tensor& x = inputs[0];
        const float* w = has_weight ? inputs[1].data() : nullptr;
        const bool want_w = has_weight && inputs[1].requires_grad();
        const bool want_b = has_bias && inputs[has_weight ? 2 : 1].requires_grad();
        const GradBuffer gx = grad_buffer(x);
        const std::size_t chunks = parallel::chunks_for(rows, std::max<std::size_t>(1, kGrain / D));
        std::vector<float> partial((want_w || want_b) ? chunks * 2 * D : 0, 0.0f);
        const auto backward_row = kernels::layer_norm_loops().backward_row;
        parallel::parallel_chunks(rows, chunks, [&](std::size_t chunk, std::size_t r0, std::size_t r1) {
            float* pw = want_w ? partial.data() + chunk * 2 * D : nullptr;
            float* pb = want_b ? partial.data() + chunk * 2 * D + D : nullptr;
            for (std::size_t r = r0; r < r1; ++r)
                backward_row(x.data() + r * D, g.data() + r * D, w, mean.data()[r], rstd.data()[r], D, pw, pb,
                             gx ? gx.data + r * D : nullptr, gx.accumulate);
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
    // Per row: the mean, the variance from the centred values (two passes, as torch), then the normalised
    // row (kernels/simd/layer_norm.cpp, the kernel level's loop).
    const auto forward_row = kernels::layer_norm_loops().forward_row;
    parallel::parallel_for(rows, std::max<std::size_t>(1, kGrain / D), [&](std::size_t r0, std::size_t r1) {
        for (std::size_t r = r0; r < r1; ++r)
            forward_row(x.data() + r * D, out.data() + r * D, D, w, bi, eps, mean.data() + r, rstd.data() + r);
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
