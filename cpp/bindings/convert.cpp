#include "convert.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "ctransformer/error.hpp"
#include "ctransformer/runtime/tensor.hpp"

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
    // Ids are range-checked in their own dtype before the cast: uint64 2**64 - 1 must be reported as
    // itself, not as the -1 that casting makes of it. No other integer dtype can exceed int64.
    if (kind == 'u' && a.itemsize() == 8) {
        auto u = py::array_t<std::uint64_t, py::array::c_style | py::array::forcecast>::ensure(a);
        const std::uint64_t* p = u.data();
        for (py::ssize_t i = 0; i < u.size(); ++i)
            if (p[i] > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
                throw ct::IndexError(std::string(arg) + ": holds token id " + std::to_string(p[i]) +
                                     " at flat position " + std::to_string(i) +
                                     ", beyond any vocabulary (ids must be below 2**63)");
    }
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

std::optional<ct::Mask> opt_mask(const py::object& obj, const char* arg) {
    if (obj.is_none()) return std::nullopt;
    return to_mask(obj, arg);
}

py::array_t<std::int64_t> ids_to_numpy(const ct::IndexArray& ids) {
    py::array_t<std::int64_t> out(std::vector<py::ssize_t>(ids.shape.begin(), ids.shape.end()));
    std::copy(ids.data.begin(), ids.data.end(), out.mutable_data());
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

py::array_t<float> copy_to_numpy(const ct::Array& a) {
    py::array_t<float> out(std::vector<py::ssize_t>(a.shape().begin(), a.shape().end()));
    std::copy(a.data(), a.data() + a.size(), out.mutable_data());
    return out;
}

namespace {

// The value of an int argument; `overflow` is -1 / +1 when it lies below / above the int64 range
// (the value is then meaningless), 0 otherwise.
std::int64_t int_value(const py::handle& obj, const std::string& arg, int& overflow) {
    if (py::isinstance<py::bool_>(obj) || !PyIndex_Check(obj.ptr()))
        throw ct::TypeError(arg + ": expected an int, got " + py::str(py::type::of(obj)).cast<std::string>());
    py::int_ v(py::reinterpret_borrow<py::object>(obj));   // operator.index(obj): NumPy integers too
    overflow = 0;
    const long long out = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (out == -1 && PyErr_Occurred()) throw py::error_already_set();
    return std::int64_t(out);
}

std::string int_text(const py::handle& obj) { return py::str(py::int_(py::reinterpret_borrow<py::object>(obj))).cast<std::string>(); }

}  // namespace

std::int64_t to_int(const py::handle& obj, const std::string& arg) {
    int overflow;
    const std::int64_t v = int_value(obj, arg, overflow);
    if (overflow != 0)
        throw ct::ValueError(arg + " = " + int_text(obj) + " is out of range (expected an integer between -2**63 and "
                             "2**63 - 1)");
    return v;
}

double to_double(const py::handle& obj, const std::string& what) {
    if (py::isinstance<py::str>(obj) || py::isinstance<py::bytes>(obj) || obj.is_none() || py::isinstance<py::bool_>(obj))
        throw ct::TypeError(what + ": expected a number, got " + type_name(obj));
    try {
        return py::float_(py::reinterpret_borrow<py::object>(obj)).cast<double>();
    } catch (py::error_already_set&) {
        throw ct::TypeError(what + ": expected a number, got " + type_name(obj));
    }
}

std::int64_t to_whole(const py::handle& obj, const std::string& what) {
    if (PyIndex_Check(obj.ptr()) && !py::isinstance<py::bool_>(obj)) return to_int(obj, what);
    const double v = to_double(obj, what);
    if (std::floor(v) != v || !std::isfinite(v))
        throw ct::ValueError(what + ": expected an integer, got " + py::repr(obj).cast<std::string>());
    if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0))
        throw ct::ValueError(what + " = " + py::repr(obj).cast<std::string>() + " is out of range (expected an integer "
                             "between -2**63 and 2**63 - 1)");
    return std::int64_t(v);
}

std::int64_t to_int_at_least(const py::handle& obj, const std::string& arg, std::int64_t minimum) {
    int overflow;
    const std::int64_t v = int_value(obj, arg, overflow);
    if (overflow < 0 || (overflow == 0 && v < minimum))
        throw ct::ValueError(arg + " must be at least " + std::to_string(minimum) + ", got " + int_text(obj));
    if (overflow > 0)
        throw ct::ValueError(arg + " = " + int_text(obj) + " is too large (at most 2**63 - 1)");
    return v;
}

std::int64_t to_dim(const py::handle& obj, std::size_t rank, const char* what) {
    int overflow;
    const std::int64_t v = int_value(obj, what, overflow);
    if (overflow != 0) ct::throw_dim_out_of_range(what, rank, int_text(obj));
    return v;
}

std::vector<std::int64_t> to_dims(const py::handle& obj, std::size_t rank, const char* what) {
    if (!py::isinstance<py::sequence>(obj) || py::isinstance<py::str>(obj))
        throw ct::TypeError(std::string(what) + ": expected a sequence of ints, got " +
                            py::str(py::type::of(obj)).cast<std::string>());
    std::vector<std::int64_t> out;
    for (auto d : py::reinterpret_borrow<py::sequence>(obj)) out.push_back(to_dim(d, rank, what));
    return out;
}

ct::Shape to_shape(const py::handle& obj, const std::string& arg) {
    if (!py::isinstance<py::sequence>(obj) || py::isinstance<py::str>(obj))
        throw ct::TypeError(arg + ": expected a sequence of ints, got " + py::str(py::type::of(obj)).cast<std::string>());
    ct::Shape out;
    std::size_t i = 0;
    for (auto d : py::reinterpret_borrow<py::sequence>(obj)) {
        const std::string what = arg + "[" + std::to_string(i++) + "]";
        int overflow;
        const std::int64_t v = int_value(d, what, overflow);
        if (overflow < 0 || (overflow == 0 && v < 0))
            throw ct::ValueError(arg + ": negative dimension " + int_text(d) + " at position " + std::to_string(i - 1) +
                                 "; sizes must be >= 0");
        if (overflow > 0)
            throw ct::ValueError(arg + ": dimension " + int_text(d) + " at position " + std::to_string(i - 1) +
                                 " is too large (at most 2**63 - 1)");
        out.push_back(std::size_t(v));
    }
    return out;
}

std::vector<std::int64_t> to_sizes(const py::handle& obj, const std::string& arg) {
    if (!py::isinstance<py::sequence>(obj) || py::isinstance<py::str>(obj))
        throw ct::TypeError(arg + ": expected a sequence of ints, got " + py::str(py::type::of(obj)).cast<std::string>());
    std::vector<std::int64_t> out;
    std::size_t i = 0;
    for (auto d : py::reinterpret_borrow<py::sequence>(obj)) {
        const std::string what = arg + "[" + std::to_string(i++) + "]";
        int overflow;
        const std::int64_t v = int_value(d, what, overflow);
        if (overflow != 0)
            throw ct::ValueError(arg + ": size " + int_text(d) + " at position " + std::to_string(i - 1) +
                                 " is out of range (sizes are >= 0, or -1 to infer one)");
        out.push_back(v);
    }
    return out;
}

std::vector<std::int64_t> to_sizes(const py::args& args, const std::string& arg) {
    if (args.size() == 1 && !PyIndex_Check(args[0].ptr())) return to_sizes(py::handle(args[0]), arg);
    return to_sizes(py::handle(args), arg);
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

std::string type_name(const py::handle& obj) { return py::str(py::type::of(obj).attr("__name__")).cast<std::string>(); }

std::vector<ct::Tensor> to_tensor_list(const py::handle& obj, const std::string& what, bool allow_single) {
    if (py::isinstance<ct::Tensor>(obj)) {
        if (allow_single) return {obj.cast<ct::Tensor>()};
        throw ct::TypeError(what + ": expected an iterable of ctransformer.Tensor or of dicts, got a single Tensor; "
                                   "wrap it in a list");
    }
    if (py::isinstance<py::set>(obj) || py::isinstance<py::frozenset>(obj))
        throw ct::TypeError(what + ": parameters need an ordered collection (list or tuple), got a set, whose order "
                                   "changes between runs");
    if (!py::hasattr(obj, "__iter__") || py::isinstance<py::str>(obj))
        throw ct::TypeError(what + ": expected an iterable of ctransformer.Tensor, got " + type_name(obj));
    std::vector<ct::Tensor> out;
    std::size_t i = 0;
    for (py::handle item : obj) {
        if (!py::isinstance<ct::Tensor>(item))
            throw ct::TypeError(what + "[" + std::to_string(i) + "]: expected a ctransformer.Tensor, got " +
                                type_name(item));
        out.push_back(item.cast<ct::Tensor>());
        ++i;
    }
    return out;
}

}  // namespace ctpy
