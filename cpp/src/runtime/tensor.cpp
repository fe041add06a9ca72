#include "ctransformer/runtime/tensor.hpp"

#include <sstream>

#include "ctransformer/runtime/allocator.hpp"
#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/error.hpp"

namespace ct {

Tensor::Tensor() : impl_(std::make_shared<TensorImpl>()) {
    impl_->storage = std::make_shared<Array>(Array::from_shape({0}));
}

Tensor::Tensor(Array data, bool requires_grad) : impl_(std::make_shared<TensorImpl>()) {
    impl_->storage = std::make_shared<Array>(std::move(data));
    impl_->requires_grad = requires_grad;
}

Tensor Tensor::zeros(const Shape& shape, bool requires_grad) { return full(shape, 0.0f, requires_grad); }

Tensor Tensor::full(const Shape& shape, float value, bool requires_grad) {
    Array a = new_array(shape, "tensor");
    a.fill(value);
    return Tensor(std::move(a), requires_grad);
}

std::size_t Tensor::size(std::int64_t d) const { return array().shape()[wrap_dim(d, dim(), "dim")]; }

float Tensor::item() const {
    if (numel() != 1)
        throw ValueError("item: only a one-element tensor can be converted to a scalar, got shape " +
                         shape_str(shape()));
    return data()[0];
}

void Tensor::set_requires_grad(bool r) {
    if (!is_leaf() && !r)
        throw RuntimeError("requires_grad: only leaf tensors can be changed; use detach() instead");
    impl_->requires_grad = r;
}

Tensor Tensor::grad() const {
    if (!impl_->grad) throw RuntimeError("grad: this tensor has no gradient yet");
    return from_impl(impl_->grad);
}

void Tensor::backward() const {
    if (numel() != 1)
        throw RuntimeError("backward: grad can be implicitly created only for one-element outputs, "
                           "this tensor has shape " + shape_str(shape()) + "; pass grad=");
    Array seed = Array::from_shape(shape());
    seed.fill(1.0f);
    run_backward(*this, seed);
}

void Tensor::backward(const Tensor& grad) const {
    if (grad.shape() != shape())
        throw ValueError("backward: grad must have the output's shape " + shape_str(shape()) +
                         ", got " + shape_str(grad.shape()));
    run_backward(*this, grad.array());
}

Tensor Tensor::detach() const {
    Tensor t;
    t.impl_->storage = impl_->storage;
    return t;
}

std::string shape_str(const Shape& s) {
    std::ostringstream os;
    os << "(";
    for (std::size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
    if (s.size() == 1) os << ",";
    os << ")";
    return os.str();
}

std::size_t checked_mul(std::size_t a, std::size_t b, const std::string& what) {
    std::size_t out;
    if (__builtin_mul_overflow(a, b, &out))
        throw ValueError(what + ": " + std::to_string(a) + " x " + std::to_string(b) +
                         " elements overflows a 64-bit count");
    return out;
}

std::size_t checked_numel(const Shape& s, const std::string& what) {
    for (auto d : s)
        if (d == 0) return 0;
    std::size_t n = 1;
    for (auto d : s)
        if (__builtin_mul_overflow(n, d, &n))
            throw ValueError(what + ": shape " + shape_str(s) + " has more elements than a 64-bit count holds "
                             "(the element count overflows)");
    return n;
}

std::size_t numel_of(const Shape& s) { return checked_numel(s, "shape"); }

Array new_array(const Shape& shape, const std::string& what) {
    const std::size_t n = checked_numel(shape, what);
    std::size_t bytes;
    if (__builtin_mul_overflow(n, sizeof(float), &bytes))
        throw ValueError(what + ": shape " + shape_str(shape) +
                         " needs more bytes than a 64-bit count holds (the byte count overflows)");
    auto which = [&] { return what + ": shape " + shape_str(shape) + " (" + std::to_string(n) + " float32 elements)"; };
    const std::size_t total = physical_memory_bytes();
    if (total != 0 && bytes > total) check_fits_in_memory(bytes, which());
    try {
        return Array::from_shape(shape);
    } catch (const std::bad_alloc&) {   // ct::MemoryError included: say which tensor it was
        throw MemoryError(which() + " needs " + std::to_string(bytes) + " bytes: out of memory");
    }
}

void throw_dim_out_of_range(const std::string& what, std::size_t rank, const std::string& dim) {
    const std::int64_t r = std::int64_t(rank);
    throw IndexError(what + ": dimension out of range (expected to be in range of [" + std::to_string(-r) + ", " +
                     std::to_string(r - 1) + "], but got " + dim + ")");
}

std::size_t wrap_dim(std::int64_t dim, std::size_t rank, const char* what) {
    const std::int64_t r = std::int64_t(rank);
    if (dim < -r || dim >= r || r == 0) throw_dim_out_of_range(what, rank, std::to_string(dim));
    return static_cast<std::size_t>(dim < 0 ? dim + r : dim);
}

}  // namespace ct
