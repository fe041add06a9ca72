#include "ctransformer/ops/elementwise.hpp"

#include "broadcast.hpp"
#include "ctransformer/autograd.hpp"

namespace ct {

namespace {

enum class BinaryOp { Add, Sub, Mul, Div };

const char* op_name(BinaryOp op) {
    switch (op) {
        case BinaryOp::Add: return "add";
        case BinaryOp::Sub: return "sub";
        case BinaryOp::Mul: return "mul";
        default: return "div";
    }
}

// d(a op b)/da and d(a op b)/db, summed over broadcast dimensions by the walk itself:
// each output element adds into the input offset it was read from.
struct BinaryBackward : Node {
    BinaryOp op;
    Shape out_shape;
    explicit BinaryBackward(BinaryOp o, Shape s) : op(o), out_shape(std::move(s)) {}
    const char* name() const override { return op_name(op); }
    void backward(const Array& g) override {
        const Tensor& a = inputs[0];
        const Tensor& b = inputs[1];
        Array* ga = grad_slot(a);
        Array* gb = grad_slot(b);
        const auto sa = detail::broadcast_strides(a.shape(), out_shape);
        const auto sb = detail::broadcast_strides(b.shape(), out_shape);
        const float* pa = a.data();
        const float* pb = b.data();
        const float* pg = g.data();
        float* da = ga ? ga->data() : nullptr;
        float* db = gb ? gb->data() : nullptr;
        detail::for_each_broadcast(out_shape, sa, sb, [&](std::size_t i, std::size_t ia, std::size_t ib) {
            const float gi = pg[i];
            switch (op) {
                case BinaryOp::Add: if (da) da[ia] += gi; if (db) db[ib] += gi; break;
                case BinaryOp::Sub: if (da) da[ia] += gi; if (db) db[ib] -= gi; break;
                case BinaryOp::Mul: if (da) da[ia] += gi * pb[ib]; if (db) db[ib] += gi * pa[ia]; break;
                case BinaryOp::Div:  // d(a/b)/da = 1/b, d(a/b)/db = -a/b^2
                    if (da) da[ia] += gi / pb[ib];
                    if (db) db[ib] -= gi * pa[ia] / (pb[ib] * pb[ib]);
                    break;
            }
        });
    }
};

Tensor binary(const Tensor& a, const Tensor& b, BinaryOp op) {
    const Shape shape = detail::broadcast_shapes(a.shape(), b.shape(), op_name(op));
    Tensor out(Array::from_shape(shape));
    const float* pa = a.data();
    const float* pb = b.data();
    float* po = out.data();
    detail::for_each_broadcast(shape, detail::broadcast_strides(a.shape(), shape),
                               detail::broadcast_strides(b.shape(), shape),
                               [&](std::size_t i, std::size_t ia, std::size_t ib) {
                                   switch (op) {
                                       case BinaryOp::Add: po[i] = pa[ia] + pb[ib]; break;
                                       case BinaryOp::Sub: po[i] = pa[ia] - pb[ib]; break;
                                       case BinaryOp::Mul: po[i] = pa[ia] * pb[ib]; break;
                                       case BinaryOp::Div: po[i] = pa[ia] / pb[ib]; break;
                                   }
                               });
    if (needs_grad({&a, &b})) attach(out, std::make_shared<BinaryBackward>(op, shape), {&a, &b});
    return out;
}

// y = x * s (or x / s, or x + s): dy/dx is s (1/s, 1).
struct ScalarBackward : Node {
    float dydx;
    explicit ScalarBackward(float d) : dydx(d) {}
    const char* name() const override { return "scalar"; }
    void backward(const Array& g) override {
        if (Array* gx = grad_slot(inputs[0])) {
            float* d = gx->data();
            const float* pg = g.data();
            for (std::size_t i = 0; i < g.size(); ++i) d[i] += pg[i] * dydx;
        }
    }
};

template <class F>
Tensor scalar_op(const Tensor& x, float dydx, F f) {
    Tensor out(Array::from_shape(x.shape()));
    const float* px = x.data();
    float* po = out.data();
    for (std::size_t i = 0; i < x.numel(); ++i) po[i] = f(px[i]);
    if (needs_grad({&x})) attach(out, std::make_shared<ScalarBackward>(dydx), {&x});
    return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary(a, b, BinaryOp::Add); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(a, b, BinaryOp::Sub); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(a, b, BinaryOp::Mul); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(a, b, BinaryOp::Div); }
Tensor scale(const Tensor& x, float s) { return scalar_op(x, s, [s](float v) { return v * s; }); }
Tensor div_scalar(const Tensor& x, float s) { return scalar_op(x, 1.0f / s, [s](float v) { return v / s; }); }
Tensor add_scalar(const Tensor& x, float s) { return scalar_op(x, 1.0f, [s](float v) { return v + s; }); }
Tensor neg(const Tensor& x) { return scale(x, -1.0f); }

}  // namespace ct
