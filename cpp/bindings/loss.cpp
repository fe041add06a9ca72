// ctransformer._core.loss: loss modules with state (the Annotated Transformer's LabelSmoothing).
#include "bindings.hpp"
#include "convert.hpp"
#include "ctransformer/error.hpp"
#include "ctransformer/loss/label_smoothing.hpp"

namespace ctpy {

using ct::Tensor;

void bind_loss(py::module_& m) {
    py::class_<ct::LabelSmoothing>(m, "LabelSmoothing", R"doc(LabelSmoothing(size, padding_idx, smoothing=0.0)

The Annotated Transformer's criterion: KL divergence (summed) of log-probabilities x (N, size) from the smoothed
target distribution: smoothing / (size - 2) everywhere, 1 - smoothing at the target, 0 in the
padding column and in rows whose target is padding_idx. ``crit(x, target)`` returns a 0-d Tensor;
``crit.true_dist`` is the distribution of the last call (a NumPy array), None before one.)doc")
        .def(py::init([](py::object size, py::object padding_idx, double smoothing) {
            if (!py::isinstance<py::int_>(size) || py::int_(size) < py::int_(0))
                throw ct::TypeError("LabelSmoothing: size must be a non-negative int (the vocabulary size), got " +
                                    py::repr(size).cast<std::string>());
            if (!py::isinstance<py::int_>(padding_idx))
                throw ct::TypeError("LabelSmoothing: padding_idx must be an int, got " + py::repr(padding_idx).cast<std::string>());
            return ct::LabelSmoothing(to_size(size, "LabelSmoothing: size"), to_int(padding_idx, "LabelSmoothing: padding_idx"),
                                      smoothing);
        }), py::arg("size"), py::arg("padding_idx"), py::arg("smoothing") = 0.0)
        .def("__call__", [](ct::LabelSmoothing& crit, const Tensor& x, py::object target) {
            ct::IndexArray t = to_index_array(target, "target");
            py::gil_scoped_release release;
            return crit.forward(x, t);
        }, py::arg("x"), py::arg("target"), "The summed KL loss (0-d Tensor) of log-probabilities x against target ids.")
        .def("forward", [](ct::LabelSmoothing& crit, const Tensor& x, py::object target) {
            ct::IndexArray t = to_index_array(target, "target");
            py::gil_scoped_release release;
            return crit.forward(x, t);
        }, py::arg("x"), py::arg("target"))
        .def_property_readonly("true_dist", [](const ct::LabelSmoothing& crit) -> py::object {
            if (!crit.true_dist()) return py::none();
            return py::array(to_numpy(*crit.true_dist())).attr("copy")();
        }, "The target distribution of the last call, (N, size) float32 (a copy), or None.")
        .def_property_readonly("size", &ct::LabelSmoothing::size)
        .def_property_readonly("padding_idx", &ct::LabelSmoothing::padding_idx)
        .def_property_readonly("smoothing", &ct::LabelSmoothing::smoothing)
        .def_property_readonly("confidence", &ct::LabelSmoothing::confidence)
        .def("__repr__", [](const ct::LabelSmoothing& c) {
            return "LabelSmoothing(size=" + std::to_string(c.size()) + ", padding_idx=" + std::to_string(c.padding_idx()) +
                   ", smoothing=" + py::repr(py::float_(c.smoothing())).cast<std::string>() + ")";
        });
}

}  // namespace ctpy
