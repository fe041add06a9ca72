#include "ctransformer/ops/shape.hpp"

#include <algorithm>

#include "ctransformer/autograd.hpp"
#include "ctransformer/error.hpp"

namespace ct {

namespace {

// Reshape keeps the element order, so its backward is the same copy the other way.
struct ReshapeBackward : Node {
    const char* name() const override { return "reshape"; }
    void backward(const Array& g) override {
        if (Array* gx = grad_slot(inputs[0]))
            for (std::size_t i = 0; i < g.size(); ++i) gx->data()[i] += g.data()[i];
    }
};

// out[j] = x[source[j]] for a permutation of axes; source offsets are computed once.
std::vector<std::size_t> permuted_sources(const Shape& in, const std::vector<std::size_t>& dims) {
    const std::size_t rank = in.size();
    std::vector<std::size_t> in_strides(rank, 1);
    for (std::size_t d = rank; d-- > 1;) in_strides[d - 1] = in_strides[d] * in[d];
    Shape out(rank);
    std::vector<std::size_t> strides(rank);
    for (std::size_t d = 0; d < rank; ++d) {
        out[d] = in[dims[d]];
        strides[d] = in_strides[dims[d]];
    }
    const std::size_t n = numel_of(in);
    std::vector<std::size_t> source(n);
    std::vector<std::size_t> index(rank, 0);
    std::size_t offset = 0;
    for (std::size_t j = 0; j < n; ++j) {
        source[j] = offset;
        for (std::size_t d = rank; d-- > 0;) {
            ++index[d];
            offset += strides[d];
            if (index[d] < out[d]) break;
            offset -= strides[d] * out[d];
            index[d] = 0;
        }
    }
    return source;
}

struct PermuteBackward : Node {
    std::vector<std::size_t> source;
    const char* name() const override { return "permute"; }
    void backward(const Array& g) override {
        if (Array* gx = grad_slot(inputs[0]))
            for (std::size_t j = 0; j < source.size(); ++j) gx->data()[source[j]] += g.data()[j];
    }
    void release_saved() override { source.clear(); }
};

}  // namespace

Tensor reshape(const Tensor& x, const std::vector<std::int64_t>& shape) {
    Shape out_shape(shape.size());
    std::size_t known = 1;
    int inferred = -1;
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (shape[i] == -1) {
            if (inferred >= 0) throw ValueError("reshape: only one dimension can be -1, got " + std::to_string(i) + " and " + std::to_string(inferred));
            inferred = int(i);
        } else if (shape[i] < 0) {
            throw ValueError("reshape: invalid size " + std::to_string(shape[i]) + " at dimension " + std::to_string(i));
        } else {
            out_shape[i] = std::size_t(shape[i]);
            known *= out_shape[i];
        }
    }
    if (inferred >= 0) {
        if (known == 0 || x.numel() % known != 0)
            throw ValueError("reshape: cannot infer dimension " + std::to_string(inferred) + " for " +
                             std::to_string(x.numel()) + " elements of shape " + shape_str(x.shape()));
        out_shape[inferred] = x.numel() / known;
    }
    if (numel_of(out_shape) != x.numel())
        throw ValueError("reshape: shape " + shape_str(out_shape) + " is invalid for input of shape " +
                         shape_str(x.shape()) + " (" + std::to_string(x.numel()) + " elements)");
    Tensor out(Array::from_shape(out_shape));
    std::copy(x.data(), x.data() + x.numel(), out.data());
    if (needs_grad({&x})) attach(out, std::make_shared<ReshapeBackward>(), {&x});
    return out;
}

Tensor permute(const Tensor& x, const std::vector<int>& dims) {
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
    auto source = permuted_sources(in, d);
    Tensor out(Array::from_shape(out_shape));
    for (std::size_t j = 0; j < source.size(); ++j) out.data()[j] = x.data()[source[j]];
    if (needs_grad({&x})) {
        auto node = std::make_shared<PermuteBackward>();
        node->source = std::move(source);
        attach(out, node, {&x});
    }
    return out;
}

Tensor transpose(const Tensor& x, int dim0, int dim1) {
    const std::size_t rank = x.dim();
    const std::size_t a = wrap_dim(dim0, rank, "transpose (dim0)"), b = wrap_dim(dim1, rank, "transpose (dim1)");
    std::vector<int> dims(rank);
    for (std::size_t i = 0; i < rank; ++i) dims[i] = int(i);
    std::swap(dims[a], dims[b]);
    return permute(x, dims);
}

}  // namespace ct
