#include "ctransformer/tensor.hpp"

#include <sstream>

#include "ctransformer/autograd.hpp"
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
    Array a = Array::from_shape(shape);
    a.fill(value);
    return Tensor(std::move(a), requires_grad);
}

std::size_t Tensor::size(int d) const { return shape()[wrap_dim(d, dim(), "dim")]; }

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

std::size_t numel_of(const Shape& s) {
    std::size_t n = 1;
    for (auto d : s) n *= d;
    return n;
}

std::size_t wrap_dim(int dim, std::size_t rank, const char* what) {
    const int r = static_cast<int>(rank);
    if (dim < -r || dim >= r || r == 0)
        throw IndexError(std::string(what) + ": dimension out of range (expected to be in range of [" +
                         std::to_string(-r) + ", " + std::to_string(r - 1) + "], but got " +
                         std::to_string(dim) + ")");
    return static_cast<std::size_t>(dim < 0 ? dim + r : dim);
}

}  // namespace ct
