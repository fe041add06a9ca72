// NumPy <-> core conversions, with the boundary's checks: dtype, rank, NaN. Every error names
// the argument it is about, so a Python user sees which input was wrong and what was expected.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ctransformer/runtime/tensor.hpp"

namespace ctpy {

namespace py = pybind11;

// A floating-point array (any float dtype, cast to float32) to a tensor's data; rejects NaN.
ct::Array to_array(const py::handle& obj, const char* arg);
// Token ids: an integer array (int32 or int64 or other integer types) to an IndexArray.
ct::IndexArray to_index_array(const py::handle& obj, const char* arg);
// A boolean or integer array to a Mask (nonzero = true).
ct::Mask to_mask(const py::handle& obj, const char* arg);
// An optional mask argument: None -> no mask (std::nullopt), else to_mask.
std::optional<ct::Mask> opt_mask(const py::object& obj, const char* arg);
// Token ids (decoding's output) as a new int64 NumPy array of their shape.
py::array_t<std::int64_t> ids_to_numpy(const ct::IndexArray& ids);
// A tensor's data as a NumPy view that keeps the storage alive.
py::array to_numpy(const ct::Tensor& t);
// A core array as a new float32 NumPy array of its shape (a copy: the array may change after).
py::array_t<float> copy_to_numpy(const ct::Array& a);
// A real number argument (a Python or NumPy number; not a bool, str or None), else a TypeError naming `what`.
double to_double(const py::handle& obj, const std::string& what);
// A whole number: an int, or a float with no fraction (as state dicts may hold), in the int64 range.
std::int64_t to_whole(const py::handle& obj, const std::string& what);
// An integer argument (a Python int or a NumPy integer); anything else is a TypeError naming `arg`,
// and an int beyond 64 bits a ValueError naming `arg` (never pybind11's "Unable to cast").
std::int64_t to_int(const py::handle& obj, const std::string& arg);
// An integer argument >= minimum (a count, a size): below it, or below -2**63, "arg must be at least
// minimum, got v"; beyond 2**63 - 1 "arg = v is too large".
std::int64_t to_int_at_least(const py::handle& obj, const std::string& arg, std::int64_t minimum);
// A size (an int >= 0, at most 2**63 - 1), as to_int_at_least(obj, arg, 0).
inline std::size_t to_size(const py::handle& obj, const std::string& arg) { return std::size_t(to_int_at_least(obj, arg, 0)); }
// A dimension index of a tensor of rank `rank`: any Python int, refused with the core's IndexError
// (naming `what` and the range [-rank, rank - 1]) when out of range, however large.
std::int64_t to_dim(const py::handle& obj, std::size_t rank, const char* what);
// A list of dimension indices (permute's dims), each as to_dim.
std::vector<std::int64_t> to_dims(const py::handle& obj, std::size_t rank, const char* what);
// A shape: a sequence of ints >= 0 (ValueError naming `arg` for a negative or a > 64-bit size).
ct::Shape to_shape(const py::handle& obj, const std::string& arg);
// reshape/view sizes: ints >= -1, as `shape` or as separate arguments (x.reshape(2, 3)).
std::vector<std::int64_t> to_sizes(const py::args& args, const std::string& arg);
std::vector<std::int64_t> to_sizes(const py::handle& obj, const std::string& arg);
// A Tensor argument, or a NumPy array / Python number turned into a constant tensor.
ct::Tensor as_tensor(const py::handle& obj, const char* arg);

// An integer parameter taken as the Python object it was, so to_int / to_size can check it by name
// (a bare std::size_t parameter would let pybind11 refuse a 2**64 with "incompatible function
// arguments" naming nothing). Unlike py::object it reads `int` in signatures, so the type stubs and
// mypy still know the parameter is an integer.
struct Int : py::object {
    Int() = default;
    explicit Int(py::object o) : py::object(std::move(o)) {}
    static constexpr auto stub_name = py::detail::io_name("typing.SupportsInt | typing.SupportsIndex", "int");
};

// A real-number parameter taken as the Python object it was, so to_double can check it by name (a bare double
// parameter lets pybind11 refuse a str with "incompatible function arguments"); it reads `float` in signatures.
struct Real : py::object {
    Real() = default;
    explicit Real(py::object o) : py::object(std::move(o)) {}
    static constexpr auto stub_name = py::detail::io_name("typing.SupportsFloat | typing.SupportsIndex", "float");
};

// The name of an object's type, for error messages ("list", "NoneType", ...).
std::string type_name(const py::handle& obj);
// An iterable of tensors (or one tensor, when `allow_single`) as a vector, in order; a set is refused
// (its order changes between runs) and every error names `what` and the offending item.
std::vector<ct::Tensor> to_tensor_list(const py::handle& obj, const std::string& what, bool allow_single);

}  // namespace ctpy

namespace pybind11::detail {
// Int and Real take any object; the function that receives it checks it, naming the argument.
template <typename T>
struct object_taken_as_is {
    PYBIND11_TYPE_CASTER(T, T::stub_name);
    bool load(handle src, bool) {
        if (!src) return false;
        value = T(reinterpret_borrow<object>(src));
        return true;
    }
    static handle cast(const T& v, return_value_policy, handle) { return v.inc_ref(); }
};
template <>
struct type_caster<ctpy::Int> : object_taken_as_is<ctpy::Int> {};
template <>
struct type_caster<ctpy::Real> : object_taken_as_is<ctpy::Real> {};
}  // namespace pybind11::detail
