#include "ctransformer/ops/softmax.hpp"

#include <cmath>
#include <limits>

#include "../runtime/parallel.hpp"
#include "../kernels/simd/softmax.hpp"
#include "ctransformer/runtime/autograd.hpp"

namespace ct {

namespace {

// A dimension seen as (outer, n, inner): element (o, j, i) sits at (o * n + j) * inner + i.
struct Lanes {
    std::size_t outer = 1, n = 1, inner = 1;
};

Lanes lanes_of(const Shape& s, std::size_t dim) {
    Lanes l;
    for (std::size_t d = 0; d < dim; ++d) l.outer *= s[d];
    l.n = s[dim];
    for (std::size_t d = dim + 1; d < s.size(); ++d) l.inner *= s[d];
    return l;
}

// softmax: y_j = exp(x_j - max) / sum exp(x - max); log_softmax: x_j - max - log sum exp(x - max).
// A lane of all -inf gives NaN, as torch does.
// Rows (inner == 1, the last dimension) take the vector loops of the kernel level
// (kernels/simd/softmax.cpp), split over threads.
void softmax_rows(const float* x, float* y, std::size_t rows, std::size_t n, bool log) {
    const auto forward_row = kernels::softmax_loops().forward_row;
    parallel::parallel_for(rows, std::max<std::size_t>(1, 8192 / std::max<std::size_t>(n, 1)),
                           [&](std::size_t r0, std::size_t r1) {
        for (std::size_t r = r0; r < r1; ++r) forward_row(x + r * n, y + r * n, n, log);
    });
}

void softmax_forward(const float* x, float* y, const Lanes& l, bool log) {
    if (l.inner == 1) return softmax_rows(x, y, l.outer, l.n, log);
    for (std::size_t o = 0; o < l.outer; ++o)
        for (std::size_t i = 0; i < l.inner; ++i) {
            const float* xl = x + o * l.n * l.inner + i;
            float* yl = y + o * l.n * l.inner + i;
            float mx = -std::numeric_limits<float>::infinity();
            for (std::size_t j = 0; j < l.n; ++j) mx = std::max(mx, xl[j * l.inner]);
            double total = 0.0;
            for (std::size_t j = 0; j < l.n; ++j) total += std::exp(xl[j * l.inner] - mx);
            if (log) {
                const float lse = float(std::log(total));
                for (std::size_t j = 0; j < l.n; ++j) yl[j * l.inner] = xl[j * l.inner] - mx - lse;
            } else {
                const float inv = float(1.0 / total);
                for (std::size_t j = 0; j < l.n; ++j) yl[j * l.inner] = std::exp(xl[j * l.inner] - mx) * inv;
            }
        }
}

// softmax: dx_j = y_j (g_j - sum_k g_k y_k); log_softmax: dx_j = g_j - exp(y_j) sum_k g_k.
struct SoftmaxBackward : Node {
    Tensor out;
    Lanes l;
    bool log;
    SoftmaxBackward(Tensor o, Lanes lanes, bool lg) : out(std::move(o)), l(lanes), log(lg) {}
    const char* name() const override { return log ? "log_softmax" : "softmax"; }
    void backward(const Array& g) override {
        if (l.inner == 1) return backward_rows(g);
        Array* gx = grad_slot(inputs[0]);
        if (!gx) return;
        for (std::size_t o = 0; o < l.outer; ++o)
            for (std::size_t i = 0; i < l.inner; ++i) {
                const std::size_t base = o * l.n * l.inner + i;
                const float* y = out.data() + base;
                const float* gl = g.data() + base;
                float* d = gx->data() + base;
                double acc = 0.0;
                for (std::size_t j = 0; j < l.n; ++j) acc += log ? gl[j * l.inner] : gl[j * l.inner] * y[j * l.inner];
                const float s = float(acc);
                for (std::size_t j = 0; j < l.n; ++j) {
                    const std::size_t at = j * l.inner;
                    d[at] += log ? gl[at] - std::exp(y[at]) * s : y[at] * (gl[at] - s);
                }
            }
    }
    void backward_rows(const Array& g) {
        GradBuffer gx = grad_buffer(inputs[0]);
        if (!gx) return;
        const std::size_t n = l.n;
        const auto backward_row = kernels::softmax_loops().backward_row;
        parallel::parallel_for(l.outer, std::max<std::size_t>(1, 8192 / std::max<std::size_t>(n, 1)),
                               [&](std::size_t r0, std::size_t r1) {
            for (std::size_t r = r0; r < r1; ++r)
                backward_row(out.data() + r * n, g.data() + r * n, gx.data + r * n, n, log, gx.accumulate);
        });
    }
    void release_saved() override { out = Tensor(); }
};

Tensor softmax_impl(const Tensor& x, std::int64_t dim, bool log) {
    const std::size_t d = wrap_dim(dim, x.dim(), log ? "log_softmax (dim)" : "softmax (dim)");
    const Lanes l = lanes_of(x.shape(), d);
    Tensor out(Array::from_shape(x.array().shape()));
    softmax_forward(x.data(), out.data(), l, log);
    if (needs_grad({&x})) attach(out, std::make_shared<SoftmaxBackward>(out.detach(), l, log), {&x});
    return out;
}

}  // namespace

Tensor softmax(const Tensor& x, std::int64_t dim) { return softmax_impl(x, dim, false); }
Tensor log_softmax(const Tensor& x, std::int64_t dim) { return softmax_impl(x, dim, true); }

}  // namespace ct
