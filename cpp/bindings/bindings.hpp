// One binding function per area; module.cpp calls them all.
// Signatures are the typing of the package (scripts/generate_stubs.py turns them into .pyi stubs), so
// arguments have py::arg names, and an inexact float default is a double literal (py::arg("p") = 0.1,
// not 0.1f): the C++ float still receives 0.1f, and the signature reads 0.1, not 0.10000000149011612.
#pragma once
#include <pybind11/pybind11.h>

namespace ctpy {

namespace py = pybind11;

void bind_tensor(py::module_& m);
void bind_functional(py::module_& m);
void bind_nn_module(py::module_& nn);
void bind_nn_transformer(py::module_& nn);
void bind_nn_gpt(py::module_& nn);
void bind_optim(py::module_& m);
void bind_loss(py::module_& m);
void bind_decode(py::module_& m);
void bind_distributed(py::module_& m);
void bind_precision(py::module_& m);
void bind_quantization(py::module_& m);
void bind_serve(py::module_& m);

}  // namespace ctpy
