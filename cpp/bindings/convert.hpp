// NumPy <-> core conversions, with the boundary's checks: dtype, rank, NaN. Every error names
// the argument it is about, so a Python user sees which input was wrong and what was expected.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "ctransformer/tensor.hpp"

namespace ctpy {

namespace py = pybind11;

// A floating-point array (any float dtype, cast to float32) to a tensor's data; rejects NaN.
ct::Array to_array(const py::handle& obj, const char* arg);
// Token ids: an integer array (int32 or int64 or other integer types) to an IndexArray.
ct::IndexArray to_index_array(const py::handle& obj, const char* arg);
// A boolean or integer array to a Mask (nonzero = true).
ct::Mask to_mask(const py::handle& obj, const char* arg);
// A tensor's data as a NumPy view that keeps the storage alive.
py::array to_numpy(const ct::Tensor& t);
// An integer argument (a Python int or a NumPy integer); anything else is a TypeError naming `arg`.
std::int64_t to_int(const py::handle& obj, const char* arg);
// A Tensor argument, or a NumPy array / Python number turned into a constant tensor.
ct::Tensor as_tensor(const py::handle& obj, const char* arg);

}  // namespace ctpy
