#include "ctransformer/ops/reduce.hpp"

#include "ctransformer/runtime/autograd.hpp"

namespace ct {

namespace {

// Reduction over one dimension seen as (outer, n, inner); the whole tensor is outer = inner = 1.
// Backward spreads g (times 1/n for a mean) back over the reduced dimension.
struct ReduceBackward : Node {
    std::size_t outer, n, inner;
    float factor;   // 1 for a sum, 1/n for a mean
    bool is_mean;   // not factor != 1: a mean over one element has factor 1 too
    const char* name() const override { return is_mean ? "mean" : "sum"; }
    void backward(const Array& g) override {
        Array* gx = grad_slot(inputs[0]);
        if (!gx) return;
        for (std::size_t o = 0; o < outer; ++o)
            for (std::size_t j = 0; j < n; ++j)
                for (std::size_t i = 0; i < inner; ++i)
                    gx->data()[(o * n + j) * inner + i] += g.data()[o * inner + i] * factor;
    }
};

Tensor reduce(const Tensor& x, std::size_t outer, std::size_t n, std::size_t inner, const Shape& out_shape, bool mean) {
    Tensor out(Array::from_shape(out_shape));
    for (std::size_t o = 0; o < outer; ++o)
        for (std::size_t i = 0; i < inner; ++i) {
            double acc = 0.0;
            for (std::size_t j = 0; j < n; ++j) acc += x.data()[(o * n + j) * inner + i];
            out.data()[o * inner + i] = float(mean ? acc / double(n) : acc);
        }
    if (needs_grad({&x})) {
        auto node = std::make_shared<ReduceBackward>();
        node->outer = outer;
        node->n = n;
        node->inner = inner;
        node->factor = mean ? 1.0f / float(n) : 1.0f;
        node->is_mean = mean;
        attach(out, node, {&x});
    }
    return out;
}

Tensor reduce_dim(const Tensor& x, std::int64_t dim, bool keepdim, bool mean) {
    const Shape s = x.shape();
    const std::size_t d = wrap_dim(dim, s.size(), mean ? "mean (dim)" : "sum (dim)");
    std::size_t outer = 1, inner = 1;
    for (std::size_t i = 0; i < d; ++i) outer *= s[i];
    for (std::size_t i = d + 1; i < s.size(); ++i) inner *= s[i];
    Shape out_shape = s;
    if (keepdim) out_shape[d] = 1;
    else out_shape.erase(out_shape.begin() + std::ptrdiff_t(d));
    return reduce(x, outer, s[d], inner, out_shape, mean);
}

}  // namespace

Tensor sum(const Tensor& x) { return reduce(x, 1, x.numel(), 1, {}, false); }
Tensor mean(const Tensor& x) { return reduce(x, 1, x.numel(), 1, {}, true); }
Tensor sum(const Tensor& x, std::int64_t dim, bool keepdim) { return reduce_dim(x, dim, keepdim, false); }
Tensor mean(const Tensor& x, std::int64_t dim, bool keepdim) { return reduce_dim(x, dim, keepdim, true); }

}  // namespace ct
