// One binding function per area; module.cpp calls them all.
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

}  // namespace ctpy
