#include "ctransformer/ops/matmul.hpp"

#include "../blas.hpp"
#include "../runtime/parallel.hpp"
#include "broadcast.hpp"
#include "ctransformer/autocast.hpp"
#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/bf16.hpp"

#include <algorithm>

namespace ct {

namespace {

// The shapes of one product: op(A) is (m, k), op(B) is (k, n); the batch dimensions broadcast.
struct MatmulPlan {
    bool trans_a, trans_b;
    std::size_t m, n, k;
    Shape batch, out_shape;
    std::vector<std::size_t> a_offsets, b_offsets;  // per output matrix, offsets of its A and B
};

MatmulPlan plan(const Shape& sa, const Shape& sb, bool trans_a, bool trans_b) {
    if (sa.size() < 2 || sb.size() < 2)
        throw ValueError("matmul: input and other need rank >= 2 (got input " + shape_str(sa) + ", other " + shape_str(sb) +
                         "); reshape vectors to (1, n) or (n, 1)");
    MatmulPlan p{trans_a, trans_b, 0, 0, 0, {}, {}, {}, {}};
    const std::size_t ra = sa.size(), rb = sb.size();
    p.m = trans_a ? sa[ra - 1] : sa[ra - 2];
    const std::size_t ka = trans_a ? sa[ra - 2] : sa[ra - 1];
    const std::size_t kb = trans_b ? sb[rb - 1] : sb[rb - 2];
    p.n = trans_b ? sb[rb - 2] : sb[rb - 1];
    if (ka != kb)
        throw ValueError("matmul: inner dimensions differ: input " + shape_str(sa) + (trans_a ? " (transposed)" : "") +
                         " has " + std::to_string(ka) + " columns, other " + shape_str(sb) +
                         (trans_b ? " (transposed)" : "") + " has " + std::to_string(kb) + " rows");
    p.k = ka;
    const Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
    p.batch = detail::broadcast_shapes(ba, bb, "matmul (batch dimensions)", "input", "other");
    p.out_shape = p.batch;
    p.out_shape.push_back(p.m);
    p.out_shape.push_back(p.n);
    const std::size_t count = numel_of(p.batch);
    p.a_offsets.resize(count);
    p.b_offsets.resize(count);
    const std::size_t a_mat = sa[ra - 2] * sa[ra - 1], b_mat = sb[rb - 2] * sb[rb - 1];
    detail::for_each_broadcast(p.batch, detail::broadcast_strides(ba, p.batch), detail::broadcast_strides(bb, p.batch),
                               [&](std::size_t i, std::size_t ia, std::size_t ib) {
                                   p.a_offsets[i] = ia * a_mat;
                                   p.b_offsets[i] = ib * b_mat;
                               });
    return p;
}

// Leading dimensions (row strides) of A and B as stored.
int lda(const MatmulPlan& p) { return int(p.trans_a ? p.m : p.k); }
int ldb(const MatmulPlan& p) { return int(p.trans_b ? p.k : p.n); }

using Gemm = void (*)(bool, bool, int, int, int, float, const float*, int, const float*, int, float, float*, int);

// f(i, gemm) for each batch entry: several entries at once on the pool's threads (each product
// on one thread) when there are several and they write disjoint outputs; otherwise one after the
// other, each product split over the threads. bf16: the products of an autocast region.
template <class F>
void for_batch(std::size_t count, bool disjoint, bool bf16, F&& f) {
    if (count > 1 && disjoint) {
        const Gemm serial = bf16 ? Gemm(&gemm_bf16_serial) : Gemm(&blas::gemm_serial);
        parallel::parallel_for(count, 1, [&](std::size_t b, std::size_t e) {
            for (std::size_t i = b; i < e; ++i) f(i, serial);
        });
    } else {
        const Gemm split = bf16 ? Gemm(&gemm_bf16) : Gemm(&blas::gemm);
        for (std::size_t i = 0; i < count; ++i) f(i, split);
    }
}

struct MatmulBackward : Node {
    MatmulPlan p;
    bool bf16;
    MatmulBackward(MatmulPlan plan_, bool h) : p(std::move(plan_)), bf16(h) {}
    const char* name() const override { return "matmul"; }
    void backward(const Array& g) override {
        const Tensor& a = inputs[0];
        const Tensor& b = inputs[1];
        const int m = int(p.m), n = int(p.n), k = int(p.k);
        const std::size_t count = p.a_offsets.size();
        // A fresh buffer is written (beta = 0) by the first product that reaches each of its
        // matrices; a matrix broadcast over the batch is reached again and accumulates.
        auto beta_for = [&](const GradBuffer& gb, std::size_t i, const std::vector<std::size_t>& offsets) {
            if (gb.accumulate) return 1.0f;
            for (std::size_t j = 0; j < i; ++j)
                if (offsets[j] == offsets[i]) return 1.0f;
            return 0.0f;
        };
        const bool a_unique = numel_of(a.shape()) / std::max<std::size_t>(p.m * p.k, 1) == count;
        const bool b_unique = numel_of(b.shape()) / std::max<std::size_t>(p.k * p.n, 1) == count;
        if (GradBuffer ga = grad_buffer(a)) {
            // Zero first where the gemms would not write everything: an empty inner dimension, or
            // an empty batch that reaches none of A's matrices.
            if (!ga.accumulate && (n == 0 || count == 0)) std::fill_n(ga.data, a.numel(), 0.0f);
            // Batch entries in parallel when each writes its own matrix of dA.
            for_batch(count, a_unique, bf16, [&](std::size_t i, Gemm gemm) {
                const float* gi = g.data() + i * p.m * p.n;  // dC, (m, n)
                const float* bi = b.data() + p.b_offsets[i];
                float* dai = ga.data + p.a_offsets[i];
                const float beta = a_unique ? ga.beta() : beta_for(ga, i, p.a_offsets);
                if (!p.trans_a)  // dA (m, k) = dC @ op(B)^T
                    gemm(false, !p.trans_b, m, k, n, 1.0f, gi, n, bi, ldb(p), beta, dai, k);
                else  // A stored (k, m): dA = op(B) @ dC^T
                    gemm(p.trans_b, true, k, m, n, 1.0f, bi, ldb(p), gi, n, beta, dai, m);
            });
        }
        if (GradBuffer gb = grad_buffer(b)) {
            if (!gb.accumulate && (m == 0 || count == 0)) std::fill_n(gb.data, b.numel(), 0.0f);
            for_batch(count, b_unique, bf16, [&](std::size_t i, Gemm gemm) {
                const float* gi = g.data() + i * p.m * p.n;
                const float* ai = a.data() + p.a_offsets[i];
                float* dbi = gb.data + p.b_offsets[i];
                const float beta = b_unique ? gb.beta() : beta_for(gb, i, p.b_offsets);
                if (!p.trans_b)  // dB (k, n) = op(A)^T @ dC
                    gemm(!p.trans_a, false, k, n, m, 1.0f, ai, lda(p), gi, n, beta, dbi, n);
                else  // B stored (n, k): dB = dC^T @ op(A)
                    gemm(true, p.trans_a, n, k, m, 1.0f, gi, n, ai, lda(p), beta, dbi, k);
            });
        }
    }
};

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
    MatmulPlan p = plan(a.shape(), b.shape(), trans_a, trans_b);
    Tensor out(Array::from_shape(p.out_shape));
    if (p.k == 0) out.array().fill(0.0f);
    const bool bf16 = autocast::enabled();
    for_batch(p.a_offsets.size(), true, bf16, [&](std::size_t i, Gemm gemm) {
        gemm(trans_a, trans_b, int(p.m), int(p.n), int(p.k), 1.0f, a.data() + p.a_offsets[i], lda(p),
             b.data() + p.b_offsets[i], ldb(p), 0.0f, out.data() + i * p.m * p.n, int(p.n));
    });
    if (needs_grad({&a, &b})) attach(out, std::make_shared<MatmulBackward>(std::move(p), bf16), {&a, &b});
    return out;
}

}  // namespace ct
