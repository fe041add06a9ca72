#include "convert.hpp"

#include <cmath>
#include <string>

#include "ctransformer/error.hpp"

namespace ctpy {

namespace {

py::array as_numpy(const py::handle& obj) {
    return py::module_::import("numpy").attr("asarray")(obj).cast<py::array>();
}

ct::Shape shape_of(const py::array& a) {
    return ct::Shape(a.shape(), a.shape() + a.ndim());
}

std::string dtype_name(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

}  // namespace

ct::Array to_array(const py::handle& obj, const char* arg) {
    py::array a = as_numpy(obj);
    const char kind = a.dtype().kind();
    if (kind != 'f')
        throw ct::TypeError(std::string(arg) + ": expected a floating-point array (converted to float32), got dtype " +
                            dtype_name(a) + (kind == 'i' || kind == 'u' ? "; token ids go to the ops that take ids" : ""));
    auto f = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
    ct::Array out = ct::Array::from_shape(shape_of(f));
    const float* src = f.data();
    for (std::size_t i = 0; i < out.size(); ++i) {
        if (std::isnan(src[i]))
            throw ct::ValueError(std::string(arg) + ": contains NaN at flat position " + std::to_string(i) +
                                 "; expected finite or infinite values only");
        out.data()[i] = src[i];
    }
    return out;
}

ct::IndexArray to_index_array(const py::handle& obj, const char* arg) {
    py::array a = as_numpy(obj);
    const char kind = a.dtype().kind();
    if (kind != 'i' && kind != 'u')
        throw ct::TypeError(std::string(arg) + ": expected an integer array of token ids (int32 or int64), got dtype " +
                            dtype_name(a));
    auto ids = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    ct::IndexArray out;
    out.shape = shape_of(ids);
    out.data.assign(ids.data(), ids.data() + ids.size());
    return out;
}

ct::Mask to_mask(const py::handle& obj, const char* arg) {
    py::array a = as_numpy(obj);
    const char kind = a.dtype().kind();
    if (kind != 'b' && kind != 'i' && kind != 'u')
        throw ct::TypeError(std::string(arg) + ": expected a boolean (or 0/1 integer) mask array, got dtype " +
                            dtype_name(a));
    auto m = py::array_t<std::uint8_t, py::array::c_style | py::array::forcecast>::ensure(
        a.dtype().kind() == 'b' ? a : a.attr("astype")("bool").cast<py::array>());
    ct::Mask out;
    out.shape = shape_of(m);
    out.data.assign(m.data(), m.data() + m.size());
    return out;
}

py::array to_numpy(const ct::Tensor& t) {
    const ct::Shape shape = t.shape();
    std::vector<py::ssize_t> strides(shape.size());
    py::ssize_t stride = sizeof(float);
    for (std::size_t d = shape.size(); d-- > 0;) {
        strides[d] = stride;
        stride *= py::ssize_t(shape[d]);
    }
    // The capsule owns a reference to the storage: the array stays valid after the Tensor is gone.
    auto* keep = new std::shared_ptr<ct::Array>(t.impl()->storage);
    py::capsule owner(keep, [](void* p) { delete static_cast<std::shared_ptr<ct::Array>*>(p); });
    return py::array(py::dtype::of<float>(), std::vector<py::ssize_t>(shape.begin(), shape.end()), strides, t.data(),
                     owner);
}

std::int64_t to_int(const py::handle& obj, const char* arg) {
    if (py::isinstance<py::bool_>(obj) || !PyIndex_Check(obj.ptr()))
        throw ct::TypeError(std::string(arg) + ": expected an int, got " + py::str(py::type::of(obj)).cast<std::string>());
    return py::int_(py::reinterpret_borrow<py::object>(obj)).cast<std::int64_t>();
}

ct::Tensor as_tensor(const py::handle& obj, const char* arg) {
    if (py::isinstance<ct::Tensor>(obj)) return obj.cast<ct::Tensor>();
    auto np = py::module_::import("numpy");
    // Python numbers and NumPy scalars (np.float32(2) is not a Python float) are constants.
    if (py::isinstance<py::float_>(obj) || py::isinstance<py::int_>(obj) || py::isinstance(obj, np.attr("floating")) ||
        py::isinstance(obj, np.attr("integer"))) {
        ct::Array a = ct::Array::from_shape({});
        a.data()[0] = py::float_(py::reinterpret_borrow<py::object>(obj)).cast<float>();
        return ct::Tensor(std::move(a));
    }
    if (py::isinstance<py::array>(obj)) return ct::Tensor(to_array(obj, arg));
    throw ct::TypeError(std::string(arg) + ": expected a ctransformer.Tensor, a float32 NumPy array or a number, got " +
                        py::str(py::type::of(obj)).cast<std::string>());
}

}  // namespace ctpy
