#include "ctransformer/ops/masked_fill.hpp"

#include "broadcast.hpp"
#include "ctransformer/runtime/autograd.hpp"

namespace ct {

namespace {

std::vector<std::size_t> mask_strides(const Mask& mask, const Shape& x_shape) {
    const Shape joint = detail::broadcast_shapes(x_shape, mask.shape, "masked_fill", "input", "mask");
    if (joint != x_shape)
        throw ValueError("masked_fill: mask of shape " + shape_str(mask.shape) +
                         " must broadcast to the input's shape " + shape_str(x_shape));
    return detail::broadcast_strides(mask.shape, x_shape);
}

// The gradient passes where the input was kept and is zero where it was filled.
struct MaskedFillBackward : Node {
    Mask mask;
    const char* name() const override { return "masked_fill"; }
    void backward(const Array& g) override {
        Array* gx = grad_slot(inputs[0]);
        if (!gx) return;
        const Shape shape = inputs[0].shape();
        const auto sm = mask_strides(mask, shape);
        const std::vector<std::size_t> sx = detail::broadcast_strides(shape, shape);
        detail::for_each_broadcast(shape, sx, sm, [&](std::size_t i, std::size_t, std::size_t im) {
            if (!mask.data[im]) gx->data()[i] += g.data()[i];
        });
    }
    void release_saved() override { mask = Mask(); }
};

}  // namespace

Tensor masked_fill(const Tensor& x, const Mask& mask, float value) {
    const Shape shape = x.shape();
    const auto sm = mask_strides(mask, shape);
    Tensor out(Array::from_shape(shape));
    const float* px = x.data();
    float* po = out.data();
    detail::for_each_broadcast(shape, detail::broadcast_strides(shape, shape), sm,
                               [&](std::size_t i, std::size_t, std::size_t im) { po[i] = mask.data[im] ? value : px[i]; });
    if (needs_grad({&x})) {
        auto node = std::make_shared<MaskedFillBackward>();
        node->mask = mask;
        attach(out, node, {&x});
    }
    return out;
}

}  // namespace ct
