// Tensor: a cheap handle to shared float32 data, its gradient and the node that made it.
// Copying a Tensor shares storage (that is how weight tying works: two modules holding the
// same Tensor hold one parameter with one gradient).
#pragma once
#include <functional>
#include <utility>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "ctransformer/runtime/allocator.hpp"

namespace ct {

using Shape = std::vector<std::size_t>;
// Every tensor buffer comes from the caching allocator (allocator.hpp): reused across steps,
// 64-byte aligned, never zero-filled on allocation.
using Array = xt::xarray<float, xt::layout_type::row_major, CachingAllocator<float>>;

struct Node;

struct TensorImpl {
    std::shared_ptr<Array> storage;      // row-major, contiguous; shared by detach()
    std::shared_ptr<TensorImpl> grad;    // null until a backward reaches a leaf
    bool requires_grad = false;
    std::shared_ptr<Node> grad_fn;       // null for leaves
    // Leaves only: called once per backward pass that reaches this leaf, right after the pass's last
    // contribution to .grad (ct::register_post_accumulate_grad_hook). Data-parallel training starts
    // reducing a gradient across processes the moment it is complete, while backward goes on.
    std::vector<std::pair<std::uint64_t, std::function<void(TensorImpl&)>>> post_accumulate_grad_hooks;
};

class Tensor {
public:
    Tensor();                                      // an empty (0-element, rank-1) tensor
    explicit Tensor(Array data, bool requires_grad = false);
    static Tensor zeros(const Shape& shape, bool requires_grad = false);
    static Tensor full(const Shape& shape, float value, bool requires_grad = false);
    static Tensor from_impl(std::shared_ptr<TensorImpl> impl) { Tensor t; t.impl_ = std::move(impl); return t; }

    Shape shape() const { return Shape(array().shape().begin(), array().shape().end()); }
    // dim() and size() read the array's shape in place: shape() copies it to a vector (an allocation), and
    // a decoding step asks for sizes thousands of times.
    std::size_t dim() const { return array().shape().size(); }
    std::size_t size(std::int64_t d) const;       // d may be negative, as in torch
    std::size_t numel() const { return impl_->storage->size(); }
    float* data() const { return impl_->storage->data(); }
    Array& array() const { return *impl_->storage; }
    float item() const;                           // the value of a one-element tensor

    bool requires_grad() const { return impl_->requires_grad; }
    void set_requires_grad(bool r);
    bool has_grad() const { return impl_->grad != nullptr; }
    Tensor grad() const;                          // throws if there is none
    void zero_grad() { impl_->grad.reset(); }     // like torch: the gradient becomes None
    bool is_leaf() const { return impl_->grad_fn == nullptr; }
    const std::shared_ptr<Node>& grad_fn() const { return impl_->grad_fn; }

    // Reverse-mode differentiation from this tensor. `grad` may be omitted for one-element outputs.
    void backward() const;
    void backward(const Tensor& grad) const;
    Tensor detach() const;                        // shares data, no graph, no grad

    const std::shared_ptr<TensorImpl>& impl() const { return impl_; }
    bool same_as(const Tensor& other) const { return impl_ == other.impl_; }

private:
    std::shared_ptr<TensorImpl> impl_;
};

// Token ids and other integer inputs: a flat buffer and a shape.
struct IndexArray {
    std::vector<std::int64_t> data;
    Shape shape;
    std::size_t numel() const { return data.size(); }
};

// Boolean masks: nonzero means "keep", zero means "masked out" (the seeds' mask == 0 convention).
struct Mask {
    std::vector<std::uint8_t> data;
    Shape shape;
};

std::string shape_str(const Shape& s);

// Sizes computed from user integers (batch x length, rows x columns, a shape's element count) go
// through these: an overflow is a ct::ValueError naming `what`, never a silently small buffer.
std::size_t checked_mul(std::size_t a, std::size_t b, const std::string& what);
// The element count of a shape; 0 when any dimension is 0, whatever the others are.
std::size_t checked_numel(const Shape& s, const std::string& what);
std::size_t numel_of(const Shape& s);   // checked_numel(s, "shape")
// A fresh, uninitialised buffer of `shape` for a tensor that `what` is making: the element count
// and byte count are checked (ValueError on overflow) and a buffer larger than the machine's memory,
// or one the system refuses, is a ct::MemoryError naming the shape and the bytes.
Array new_array(const Shape& shape, const std::string& what);

// Normalise a possibly negative dimension index; `what` names the argument in the error, an
// IndexError that gives the valid range [-rank, rank - 1].
std::size_t wrap_dim(std::int64_t dim, std::size_t rank, const char* what);
// The same error for a dimension given as text (a Python int beyond 64 bits, say).
[[noreturn]] void throw_dim_out_of_range(const std::string& what, std::size_t rank, const std::string& dim);

}  // namespace ct
