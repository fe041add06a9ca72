// ctransformer.Tensor: the handle, its autograd surface and the Python operators.
#include <pybind11/stl.h>

#include <sstream>

#include "bindings.hpp"
#include "convert.hpp"
#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/error.hpp"
#include "ctransformer/ops.hpp"

namespace ctpy {

using ct::Tensor;
using release_gil = py::call_guard<py::gil_scoped_release>;

namespace {

std::string repr(const Tensor& t) {
    std::ostringstream os;
    auto np = py::module_::import("numpy");
    os << "tensor(" << py::str(np.attr("array2string")(to_numpy(t), py::arg("separator") = ", ",
                                                       py::arg("prefix") = "tensor("))
                           .cast<std::string>();
    if (t.grad_fn()) os << ", grad_fn=<" << t.grad_fn()->name() << ">";
    else if (t.requires_grad()) os << ", requires_grad=True";
    os << ")";
    return os.str();
}

py::tuple shape_tuple(const Tensor& t) {
    const ct::Shape s = t.shape();
    py::tuple out(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) out[i] = s[i];
    return out;
}

}  // namespace

void bind_tensor(py::module_& m) {
    py::class_<Tensor>(m, "Tensor", R"doc(A float32 tensor that can record the operations made on it for autograd.

Create one with ``ctransformer.tensor(array, requires_grad=False)``.)doc")
        .def_property_readonly("shape", &shape_tuple, "The shape, as a tuple.")
        .def_property_readonly("ndim", &Tensor::dim)
        .def_property_readonly("dtype", [](const Tensor&) { return py::dtype::of<float>(); })
        .def("dim", &Tensor::dim)
        .def("numel", &Tensor::numel)
        .def("__len__", [](const Tensor& t) {
            if (t.dim() == 0) throw ct::TypeError("len() of a 0-d tensor");
            return t.size(0);
        })
        .def_property("requires_grad", &Tensor::requires_grad, &Tensor::set_requires_grad)
        .def("requires_grad_", [](Tensor& t, bool r) { t.set_requires_grad(r); return t; }, py::arg("requires_grad") = true)
        .def_property_readonly("grad", [](const Tensor& t) -> py::object {
            if (!t.has_grad()) return py::none();
            return py::cast(t.grad());
        }, "The accumulated gradient (a Tensor), or None before a backward pass reaches this tensor.")
        .def_property_readonly("is_leaf", &Tensor::is_leaf)
        .def_property_readonly("grad_fn", [](const Tensor& t) -> py::object {
            if (!t.grad_fn()) return py::none();
            return py::str(t.grad_fn()->name());
        }, "The name of the op that made this tensor, or None for a leaf.")
        .def("backward", [](const Tensor& t, py::object grad) {
            if (grad.is_none()) {
                py::gil_scoped_release release;
                t.backward();
            } else {
                Tensor g = as_tensor(grad, "grad");
                py::gil_scoped_release release;
                t.backward(g);
            }
        }, py::arg("grad") = py::none(),
           "Accumulate d(self)/d(leaf) into every leaf's .grad; `grad` is needed unless self has one element. "
           "The graph is freed afterwards.")
        .def("detach", &Tensor::detach, "A tensor sharing this one's data, outside the graph.")
        .def("zero_grad", &Tensor::zero_grad, "Drop the gradient (it becomes None, as torch's set_to_none).")
        .def("numpy", &to_numpy, "The data as a NumPy array that shares memory with the tensor.")
        .def("__array__", [](const Tensor& t, py::object dtype, py::object) {
            py::array a = to_numpy(t);
            if (!dtype.is_none()) return a.attr("astype")(dtype).cast<py::array>();
            return a;
        }, py::arg("dtype") = py::none(), py::arg("copy") = py::none())
        .def("item", &Tensor::item)
        .def("__float__", &Tensor::item)
        .def("__repr__", &repr)
        .def("reshape", [](const Tensor& t, py::args shape) {
            const std::vector<std::int64_t> s = to_sizes(shape, "reshape: shape");
            py::gil_scoped_release release;
            return ct::reshape(t, s);
        })
        .def("view", [](const Tensor& t, py::args shape) {
            const std::vector<std::int64_t> s = to_sizes(shape, "view: shape");
            py::gil_scoped_release release;
            return ct::reshape(t, s);
        }, "As reshape (ctransformer tensors are always contiguous, so the result owns a copy).")
        .def("transpose", [](const Tensor& t, ctpy::Int dim0, ctpy::Int dim1) {
            const std::int64_t a = to_dim(dim0, t.dim(), "transpose: dim0"), b = to_dim(dim1, t.dim(), "transpose: dim1");
            py::gil_scoped_release release;
            return ct::transpose(t, a, b);
        }, py::arg("dim0"), py::arg("dim1"))
        .def("permute", [](const Tensor& t, py::args dims) {
            const std::vector<std::int64_t> d = dims.size() == 1 && !PyIndex_Check(dims[0].ptr())
                                                    ? to_dims(dims[0], t.dim(), "permute: dims")
                                                    : to_dims(dims, t.dim(), "permute: dims");
            py::gil_scoped_release release;
            return ct::permute(t, d);
        })
        .def("sum", [](const Tensor& t, py::object dim, bool keepdim) {
            if (dim.is_none()) return ct::sum(t);
            return ct::sum(t, to_dim(dim, t.dim(), "sum: dim"), keepdim);
        }, py::arg("dim") = py::none(), py::arg("keepdim") = false)
        .def("mean", [](const Tensor& t, py::object dim, bool keepdim) {
            if (dim.is_none()) return ct::mean(t);
            return ct::mean(t, to_dim(dim, t.dim(), "mean: dim"), keepdim);
        }, py::arg("dim") = py::none(), py::arg("keepdim") = false)
        .def("softmax", [](const Tensor& t, py::object dim) {
            const std::int64_t d = to_dim(dim, t.dim(), "softmax: dim");
            py::gil_scoped_release release;
            return ct::softmax(t, d);
        }, py::arg("dim"))
        .def("log_softmax", [](const Tensor& t, py::object dim) {
            const std::int64_t d = to_dim(dim, t.dim(), "log_softmax: dim");
            py::gil_scoped_release release;
            return ct::log_softmax(t, d);
        }, py::arg("dim"))
        .def("relu", &ct::relu, release_gil())
        .def("__add__", [](const Tensor& a, py::object b) { return ct::add(a, as_tensor(b, "other")); })
        .def("__radd__", [](const Tensor& a, py::object b) { return ct::add(as_tensor(b, "other"), a); })
        .def("__sub__", [](const Tensor& a, py::object b) { return ct::sub(a, as_tensor(b, "other")); })
        .def("__rsub__", [](const Tensor& a, py::object b) { return ct::sub(as_tensor(b, "other"), a); })
        .def("__mul__", [](const Tensor& a, py::object b) {
            if (py::isinstance<py::float_>(b) || py::isinstance<py::int_>(b)) return ct::scale(a, b.cast<float>());
            return ct::mul(a, as_tensor(b, "other"));
        })
        .def("__rmul__", [](const Tensor& a, py::object b) {
            if (py::isinstance<py::float_>(b) || py::isinstance<py::int_>(b)) return ct::scale(a, b.cast<float>());
            return ct::mul(as_tensor(b, "other"), a);
        })
        .def("__truediv__", [](const Tensor& a, py::object b) {
            if (py::isinstance<py::float_>(b) || py::isinstance<py::int_>(b)) return ct::div_scalar(a, b.cast<float>());
            return ct::div(a, as_tensor(b, "other"));
        })
        .def("__rtruediv__", [](const Tensor& a, py::object b) { return ct::div(as_tensor(b, "other"), a); })
        .def("__neg__", &ct::neg)
        .def("__matmul__", [](const Tensor& a, const Tensor& b) { py::gil_scoped_release r; return ct::matmul(a, b); })
        .def("__rmatmul__", [](const Tensor& a, py::object b) { return ct::matmul(as_tensor(b, "other"), a); })
        // As torch: NumPy arrays and scalars on the left defer to the reflected operator above,
        // instead of turning the tensor into an array and silently dropping it from the graph.
        .def_property_readonly_static("__array_priority__", [](py::object) { return 1000; });

    m.def("tensor", [](py::object data, bool requires_grad) {
        if (py::isinstance<Tensor>(data)) {  // like torch.tensor(t): a copy outside the graph
            const Tensor& t = data.cast<const Tensor&>();
            return Tensor(ct::Array(t.array()), requires_grad);
        }
        return Tensor(to_array(data, "data"), requires_grad);
    }, py::arg("data"), py::arg("requires_grad") = false,
       "A float32 tensor holding a copy of `data` (a floating-point NumPy array, list or number).");
    m.def("zeros", [](py::object shape, bool requires_grad) {
        const ct::Shape s = to_shape(shape, "zeros: shape");
        py::gil_scoped_release release;
        return Tensor::zeros(s, requires_grad);
    }, py::arg("shape"), py::arg("requires_grad") = false);
    m.def("ones", [](py::object shape, bool requires_grad) {
        const ct::Shape s = to_shape(shape, "ones: shape");
        py::gil_scoped_release release;
        return Tensor::full(s, 1.0f, requires_grad);
    }, py::arg("shape"), py::arg("requires_grad") = false);
    m.def("is_grad_enabled", &ct::grad_enabled);
    m.def("set_grad_enabled", &ct::set_grad_enabled, py::arg("enabled"),
          "Turn graph recording on or off for this thread (no_grad uses it).");
}

}  // namespace ctpy
