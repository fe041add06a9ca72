#include "ctransformer/ops/elementwise.hpp"

#include <algorithm>

#include "../parallel.hpp"
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

template <class F>
inline void for_pair(BinaryOp op, F&& f) {  // f(lambda) with the op as a compile-time choice
    switch (op) {
        case BinaryOp::Add: return f([](float x, float y) { return x + y; });
        case BinaryOp::Sub: return f([](float x, float y) { return x - y; });
        case BinaryOp::Mul: return f([](float x, float y) { return x * y; });
        default: return f([](float x, float y) { return x / y; });
    }
}

// d = (accumulate ? d : 0) + v(i) over [0, n), in parallel.
template <class V>
void write_grad(const GradBuffer& gb, std::size_t n, V v) {
    float* d = gb.data;
    const bool acc = gb.accumulate;
    parallel::parallel_for(n, kGrain, [d, acc, &v](std::size_t b, std::size_t e) {
        if (acc)
            for (std::size_t i = b; i < e; ++i) d[i] += v(i);
        else
            for (std::size_t i = b; i < e; ++i) d[i] = v(i);
    });
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
        if (GradBuffer ga = grad_buffer(a)) {
            switch (op) {
                case BinaryOp::Add: case BinaryOp::Sub: write_grad(ga, n, [&](std::size_t i) { return pg[i]; }); break;
                case BinaryOp::Mul: write_grad(ga, n, [&](std::size_t i) { return pg[i] * pb[i % inner]; }); break;
                case BinaryOp::Div: write_grad(ga, n, [&](std::size_t i) { return pg[i] / pb[i % inner]; }); break;
            }
        }
        GradBuffer gb = grad_buffer(b);
        if (!gb) return;
        auto db = [&](std::size_t i) {  // d(a op b)/db times g at output element i
            switch (op) {
                case BinaryOp::Add: return pg[i];
                case BinaryOp::Sub: return -pg[i];
                case BinaryOp::Mul: return pg[i] * pa[i];
                default: return -pg[i] * pa[i] / (pb[i % inner] * pb[i % inner]);
            }
        };
        if (layout == Layout::Same) {
            write_grad(gb, n, db);
            return;
        }
        // b repeated over `outer` rows: sum the rows, each thread over its share of b's columns.
        const std::size_t outer = inner ? n / inner : 0;
        parallel::parallel_for(inner, std::max<std::size_t>(16, kGrain / std::max<std::size_t>(outer, 1)),
                               [&](std::size_t j0, std::size_t j1) {
            if (!gb.accumulate) std::fill(gb.data + j0, gb.data + j1, 0.0f);
            for (std::size_t o = 0; o < outer; ++o)
                for (std::size_t j = j0; j < j1; ++j) gb.data[j] += db(o * inner + j);
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
        for_pair(op, [&](auto f) {
            parallel::parallel_for(n, kGrain, [&](std::size_t s0, std::size_t s1) {
                if (layout == Layout::Same)
                    for (std::size_t i = s0; i < s1; ++i) po[i] = f(pa[i], pb[i]);
                else
                    for (std::size_t i = s0; i < s1;) {  // row by row of b's size
                        const std::size_t j0 = i % inner, stop = std::min(s1, i - j0 + inner);
                        const float* row = pb - (i - j0);
                        for (; i < stop; ++i) po[i] = f(pa[i], row[i]);
                    }
            });
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
            const float s = dydx;
            write_grad(gx, g.size(), [pg, s](std::size_t i) { return pg[i] * s; });
        }
    }
};

template <class F>
Tensor scalar_op(const Tensor& x, float dydx, F f) {
    Tensor out(Array::from_shape(x.array().shape()));
    const float* px = x.data();
    float* po = out.data();
    parallel::parallel_for(x.numel(), kGrain, [&](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i) po[i] = f(px[i]);
    });
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
