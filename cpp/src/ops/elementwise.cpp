#include "ctransformer/ops/elementwise.hpp"

#include <algorithm>

#include "../kernels/simd/arithmetic.hpp"
#include "../runtime/parallel.hpp"
#include "broadcast.hpp"
#include "ctransformer/runtime/autograd.hpp"

namespace ct {

namespace {

using BinaryOp = kernels::Arith;

const char* op_name(BinaryOp op) {
    switch (op) {
        case BinaryOp::Add: return "add";
        case BinaryOp::Sub: return "sub";
        case BinaryOp::Mul: return "mul";
        default: return "div";
    }
}

constexpr std::size_t kGrain = 32768;  // elements per thread

// How b lines up with a and the output: the same shape, b repeated over a's leading dimensions
// (a bias, a position table), or anything else (the general broadcasting walk).
enum class Layout { Same, Suffix, General };

Layout layout_of(const Shape& a, const Shape& b, const Shape& out) {
    if (a != out) return Layout::General;
    if (b == out) return Layout::Same;
    std::size_t lead = 0;  // b's leading 1s do not count
    while (lead < b.size() && b[lead] == 1) ++lead;
    if (b.size() - lead > out.size()) return Layout::General;
    for (std::size_t i = lead; i < b.size(); ++i)
        if (b[i] != out[out.size() - (b.size() - i)]) return Layout::General;
    return Layout::Suffix;
}

// d(a op b)/da and d(a op b)/db, summed over broadcast dimensions by the walk itself:
// each output element adds into the input offset it was read from.
struct BinaryBackward : Node {
    BinaryOp op;
    Shape out_shape;
    Layout layout = Layout::General;
    explicit BinaryBackward(BinaryOp o, Shape s, Layout l) : op(o), out_shape(std::move(s)), layout(l) {}
    const char* name() const override { return op_name(op); }
    // a and b have the output's shape, or b repeats over a's leading dimensions (inner = b's size).
    void backward_fast(const Array& g) {
        const Tensor& a = inputs[0];
        const Tensor& b = inputs[1];
        const float* pa = a.data();
        const float* pb = b.data();
        const float* pg = g.data();
        const std::size_t n = g.size(), inner = b.numel();
        const kernels::ArithmeticLoops& loops = kernels::arithmetic_loops();
        if (GradBuffer ga = grad_buffer(a))
            parallel::parallel_for(n, kGrain, [&](std::size_t s0, std::size_t s1) {
                loops.grad_a(op, pg, pb, inner, ga.data, s0, s1, ga.accumulate);
            });
        GradBuffer gb = grad_buffer(b);
        if (!gb) return;
        if (layout == Layout::Same) {
            parallel::parallel_for(n, kGrain, [&](std::size_t s0, std::size_t s1) {
                loops.grad_b(op, pg, pa, pb, gb.data, s0, s1, gb.accumulate);
            });
            return;
        }
        // b repeated over `outer` rows: sum the rows, each thread over its share of b's columns.
        const std::size_t outer = inner ? n / inner : 0;
        parallel::parallel_for(inner, std::max<std::size_t>(16, kGrain / std::max<std::size_t>(outer, 1)),
                               [&](std::size_t j0, std::size_t j1) {
            loops.grad_b_rows(op, pg, pa, pb, outer, inner, gb.data, j0, j1, gb.accumulate);
        });
    }
    void backward(const Array& g) override {
        if (layout != Layout::General) return backward_fast(g);
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
    const Shape sa = a.shape(), sb = b.shape();
    const Shape shape = detail::broadcast_shapes(sa, sb, op_name(op));
    Tensor out(Array::from_shape(shape));
    const float* pa = a.data();
    const float* pb = b.data();
    float* po = out.data();
    const Layout layout = layout_of(sa, sb, shape);
    if (layout != Layout::General) {
        const std::size_t n = out.numel(), inner = b.numel();
        const kernels::ArithmeticLoops& loops = kernels::arithmetic_loops();
        parallel::parallel_for(n, kGrain, [&](std::size_t s0, std::size_t s1) {
            loops.binary(op, pa, pb, inner, po, s0, s1);
        });
        if (needs_grad({&a, &b})) attach(out, std::make_shared<BinaryBackward>(op, shape, layout), {&a, &b});
        return out;
    }
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
    if (needs_grad({&a, &b})) attach(out, std::make_shared<BinaryBackward>(op, shape, Layout::General), {&a, &b});
    return out;
}

// y = x * s (or x / s, or x + s): dy/dx is s (1/s, 1).
struct ScalarBackward : Node {
    float dydx;
    explicit ScalarBackward(float d) : dydx(d) {}
    const char* name() const override { return "scalar"; }
    void backward(const Array& g) override {
        if (GradBuffer gx = grad_buffer(inputs[0])) {
            const float* pg = g.data();
            const kernels::ArithmeticLoops& loops = kernels::arithmetic_loops();
            parallel::parallel_for(g.size(), kGrain, [&](std::size_t b, std::size_t e) {
                loops.scaled(pg + b, dydx, gx.data + b, e - b, gx.accumulate);
            });
        }
    }
};

Tensor scalar_op(const Tensor& x, BinaryOp op, float s, float dydx) {
    Tensor out(Array::from_shape(x.array().shape()));
    const float* px = x.data();
    float* po = out.data();
    const kernels::ArithmeticLoops& loops = kernels::arithmetic_loops();
    parallel::parallel_for(x.numel(), kGrain, [&](std::size_t b, std::size_t e) {
        loops.with_scalar(op, px + b, s, po + b, e - b);
    });
    if (needs_grad({&x})) attach(out, std::make_shared<ScalarBackward>(dydx), {&x});
    return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary(a, b, BinaryOp::Add); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(a, b, BinaryOp::Sub); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(a, b, BinaryOp::Mul); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(a, b, BinaryOp::Div); }
Tensor scale(const Tensor& x, float s) { return scalar_op(x, BinaryOp::Mul, s, s); }
Tensor div_scalar(const Tensor& x, float s) { return scalar_op(x, BinaryOp::Div, s, 1.0f / s); }
Tensor add_scalar(const Tensor& x, float s) { return scalar_op(x, BinaryOp::Add, s, 1.0f); }
Tensor neg(const Tensor& x) { return scale(x, -1.0f); }

}  // namespace ct
