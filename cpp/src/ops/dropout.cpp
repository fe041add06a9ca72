#include "ctransformer/ops/dropout.hpp"

#include <cmath>
#include <string>

#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/distributed/batch_shard.hpp"
#include "ctransformer/error.hpp"
#include "ctransformer/runtime/random.hpp"
#include "../kernels/simd/pointwise.hpp"
#include "../runtime/parallel.hpp"
#include "../runtime/random_bits.hpp"

#include <vector>

namespace ct {

namespace {

constexpr std::size_t kGrain = 32768;

// The kept elements get the factor 1/(1-p) (computed once in float32, as torch), the rest 0;
// the gradient is scaled by the same, from the saved keep mask (a byte per element), on the kernel
// level's loops (kernels/simd/pointwise.cpp), split over threads.
struct DropoutBackward : Node {
    std::vector<std::uint8_t> keep;
    float keep_scale;
    const char* name() const override { return "dropout"; }
    void backward(const Array& g) override {
        const GradBuffer gx = grad_buffer(inputs[0]);
        if (!gx) return;
        const float* pg = g.data();
        float* d = gx.data;
        const std::uint8_t* k = keep.data();
        const float s = keep_scale;
        const bool acc = gx.accumulate;
        const auto scale_by_mask = kernels::pointwise_loops().scale_by_mask;
        parallel::parallel_for(g.size(), kGrain, [&](std::size_t b, std::size_t e) {
            scale_by_mask(pg + b, k + b, s, d + b, e - b, acc);
        });
    }
    void release_saved() override { keep = {}; }
};

}  // namespace

Tensor dropout(const Tensor& x, float p, bool training) {
    if (!(p >= 0.0f && p <= 1.0f))
        throw ValueError("dropout: p must be a probability in [0, 1], got " + std::to_string(p));
    if (!training || p == 0.0f) return x;
    const float keep_scale = p == 1.0f ? 0.0f : 1.0f / (1.0f - p);
    std::vector<std::uint8_t> keep(x.numel());
    detail::dropout_keep_mask(keep.data(), keep.size(), p, default_generator().next(),
                              distributed::global_mask_offset(keep.size(), "dropout"));
    Tensor out(Array::from_shape(x.array().shape()));
    const float* px = x.data();
    float* po = out.data();
    const std::uint8_t* k = keep.data();
    const auto scale_by_mask = kernels::pointwise_loops().scale_by_mask;
    parallel::parallel_for(x.numel(), kGrain, [&](std::size_t b, std::size_t e) {
        scale_by_mask(px + b, k + b, keep_scale, po + b, e - b, false);
    });
    if (needs_grad({&x})) {
        auto node = std::make_shared<DropoutBackward>();
        node->keep = std::move(keep);
        node->keep_scale = keep_scale;
        attach(out, node, {&x});
    }
    return out;
}

}  // namespace ct
