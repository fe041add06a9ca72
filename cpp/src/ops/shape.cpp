#include "ctransformer/ops/shape.hpp"

#include <algorithm>

#include "../runtime/parallel.hpp"
#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/error.hpp"

namespace ct {

namespace {

// Reshape keeps the element order, so its backward is the same copy the other way.
struct ReshapeBackward : Node {
    const char* name() const override { return "reshape"; }
    void backward(const Array& g) override {
        if (GradBuffer gx = grad_buffer(inputs[0])) {
            const float* pg = g.data();
            float* d = gx.data;
            parallel::parallel_for(g.size(), 65536, [&](std::size_t b, std::size_t e) {
                if (gx.accumulate)
                    for (std::size_t i = b; i < e; ++i) d[i] += pg[i];
                else
                    std::copy(pg + b, pg + e, d + b);
            });
        }
    }
};

// A permutation of axes as a walk over the output in blocks: the trailing output dimensions that
// keep their input order form one contiguous block (e.g. the head dimension when swapping the
// length and head axes); the walk gives each block's offset in the output and in the input.
struct PermutePlan {
    Shape outer;                          // output dimensions above the block
    std::vector<std::size_t> in_strides;  // their strides in the input
    std::size_t block = 1;                // contiguous elements per step
    std::size_t count() const { return numel_of(outer); }
};

PermutePlan plan_permute(const Shape& in, const std::vector<std::size_t>& dims) {
    const std::size_t rank = in.size();
    std::vector<std::size_t> strides(rank, 1);
    for (std::size_t d = rank; d-- > 1;) strides[d - 1] = strides[d] * in[d];
    std::size_t k = rank;  // dims[k..] == k.. : the identity suffix
    while (k > 0 && dims[k - 1] == k - 1) --k;
    PermutePlan plan;
    for (std::size_t d = k; d < rank; ++d) plan.block *= in[d];
    for (std::size_t d = 0; d < k; ++d) {
        plan.outer.push_back(in[dims[d]]);
        plan.in_strides.push_back(strides[dims[d]]);
    }
    return plan;
}

// f(out_offset, in_offset) for every block, split over threads by blocks.
template <class F>
void walk_permute(const PermutePlan& plan, F&& f) {
    const std::size_t count = plan.count(), rank = plan.outer.size();
    parallel::parallel_for(count, std::max<std::size_t>(1, 65536 / std::max<std::size_t>(plan.block, 1)),
                           [&](std::size_t b, std::size_t e) {
        std::vector<std::size_t> index(rank);
        std::size_t in = 0, rest = b;
        for (std::size_t d = rank; d-- > 0;) {  // the multi-index of block b
            index[d] = rest % plan.outer[d];
            rest /= plan.outer[d];
            in += index[d] * plan.in_strides[d];
        }
        for (std::size_t j = b; j < e; ++j) {
            f(j * plan.block, in);
            for (std::size_t d = rank; d-- > 0;) {  // advance like an odometer
                ++index[d];
                in += plan.in_strides[d];
                if (index[d] < plan.outer[d]) break;
                in -= plan.in_strides[d] * plan.outer[d];
                index[d] = 0;
            }
        }
    });
}

// Each input element goes to exactly one output element: the backward writes every element
// of a fresh buffer once.
struct PermuteBackward : Node {
    PermutePlan plan;
    const char* name() const override { return "permute"; }
    void backward(const Array& g) override {
        GradBuffer gx = grad_buffer(inputs[0]);
        if (!gx) return;
        const float* pg = g.data();
        float* d = gx.data;
        const std::size_t n = plan.block;
        walk_permute(plan, [&](std::size_t out, std::size_t in) {
            if (gx.accumulate)
                for (std::size_t i = 0; i < n; ++i) d[in + i] += pg[out + i];
            else
                std::copy_n(pg + out, n, d + in);
        });
    }
};

}  // namespace

Tensor reshape(const Tensor& x, const std::vector<std::int64_t>& shape) {
    Shape out_shape(shape.size());
    int inferred = -1;
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (shape[i] == -1) {
            if (inferred >= 0) throw ValueError("reshape: only one dimension can be -1, got " + std::to_string(i) + " and " + std::to_string(inferred));
            inferred = int(i);
        } else if (shape[i] < 0) {
            throw ValueError("reshape: invalid size " + std::to_string(shape[i]) + " at dimension " + std::to_string(i) +
                             " of shape (sizes must be >= 0, or -1 once)");
        } else {
            out_shape[i] = std::size_t(shape[i]);
        }
    }
    Shape known_dims;   // every size but the inferred one; their product must not overflow
    for (std::size_t i = 0; i < shape.size(); ++i)
        if (int(i) != inferred) known_dims.push_back(out_shape[i]);
    const std::size_t known = checked_numel(known_dims, "reshape");
    if (inferred >= 0) {
        if (known == 0 || x.numel() % known != 0)
            throw ValueError("reshape: cannot infer dimension " + std::to_string(inferred) + " for " +
                             std::to_string(x.numel()) + " elements of shape " + shape_str(x.shape()));
        out_shape[inferred] = x.numel() / known;
    }
    if (checked_numel(out_shape, "reshape") != x.numel())
        throw ValueError("reshape: shape " + shape_str(out_shape) + " is invalid for input of shape " +
                         shape_str(x.shape()) + " (" + std::to_string(x.numel()) + " elements)");
    Tensor out(Array::from_shape(out_shape));
    const float* px = x.data();
    float* po = out.data();
    parallel::parallel_for(x.numel(), 65536, [&](std::size_t b, std::size_t e) { std::copy(px + b, px + e, po + b); });
    if (needs_grad({&x})) attach(out, std::make_shared<ReshapeBackward>(), {&x});
    return out;
}

Tensor permute(const Tensor& x, const std::vector<std::int64_t>& dims) {
    const std::size_t rank = x.dim();
    if (dims.size() != rank)
        throw ValueError("permute: dims must list all " + std::to_string(rank) + " dimensions of the input, got " +
                         std::to_string(dims.size()));
    std::vector<std::size_t> d(rank);
    std::vector<bool> used(rank, false);
    for (std::size_t i = 0; i < rank; ++i) {
        d[i] = wrap_dim(dims[i], rank, "permute (dims)");
        if (used[d[i]]) throw ValueError("permute: dimension " + std::to_string(dims[i]) + " repeats in dims");
        used[d[i]] = true;
    }
    const Shape in = x.shape();
    Shape out_shape(rank);
    for (std::size_t i = 0; i < rank; ++i) out_shape[i] = in[d[i]];
    PermutePlan plan = plan_permute(in, d);
    Tensor out(Array::from_shape(out_shape));
    const float* px = x.data();
    float* po = out.data();
    const std::size_t n = plan.block;
    walk_permute(plan, [&](std::size_t o, std::size_t i) { std::copy_n(px + i, n, po + o); });
    if (needs_grad({&x})) {
        auto node = std::make_shared<PermuteBackward>();
        node->plan = std::move(plan);
        attach(out, node, {&x});
    }
    return out;
}

Tensor transpose(const Tensor& x, std::int64_t dim0, std::int64_t dim1) {
    const std::size_t rank = x.dim();
    const std::size_t a = wrap_dim(dim0, rank, "transpose (dim0)"), b = wrap_dim(dim1, rank, "transpose (dim1)");
    std::vector<std::int64_t> dims(rank);
    for (std::size_t i = 0; i < rank; ++i) dims[i] = std::int64_t(i);
    std::swap(dims[a], dims[b]);
    return permute(x, dims);
}

}  // namespace ct
