// ctransformer._core.quantization: the int8 pieces (int8.hpp) for tests, benchmarks and quantised checkpoints:
// weights quantised and packed, activation rows quantised, the exact int32 products and int8 linear, and
// which kernel runs. Models use them through Module.quantize("int8").
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "ctransformer/error.hpp"
#include "ctransformer/int8.hpp"

namespace ctpy {

namespace {

using F32 = py::array_t<float, py::array::c_style | py::array::forcecast>;
using I8 = py::array_t<std::int8_t, py::array::c_style>;
using I32 = py::array_t<std::int32_t, py::array::c_style>;

// A 2-D array of the given dtype kind ('f': any float, converted to float32; 'i8': exactly int8).
py::array matrix(const py::handle& obj, const char* arg, bool int8) {
    py::array a = py::module_::import("numpy").attr("asarray")(obj).cast<py::array>();
    if (a.ndim() != 2)
        throw ct::ValueError(std::string(arg) + ": expected a 2-D array, got " + std::to_string(a.ndim()) + " dimensions");
    if (int8 && !a.dtype().is(py::dtype::of<std::int8_t>()))
        throw ct::TypeError(std::string(arg) + ": expected dtype int8, got " + py::str(a.dtype()).cast<std::string>());
    if (!int8 && a.dtype().kind() != 'f')
        throw ct::TypeError(std::string(arg) + ": expected float values, got dtype " + py::str(a.dtype()).cast<std::string>());
    if (int8) return I8::ensure(a);
    return F32::ensure(a);
}

F32 as_array(const std::vector<float>& v) {
    F32 out(py::ssize_t(v.size()));
    std::copy(v.begin(), v.end(), out.mutable_data());
    return out;
}

}  // namespace

void bind_quantization(py::module_& m) {
    py::class_<ct::Int8Weight, std::shared_ptr<ct::Int8Weight>>(m, "Int8Weight",
        "A weight (out_features, in_features) in int8 with one scale per output row, packed for the kernels.")
        .def(py::init([](py::handle q_obj, py::handle scale_obj) {
            I8 q = matrix(q_obj, "q", true);
            F32 scale = F32::ensure(py::module_::import("numpy").attr("asarray")(scale_obj));
            const std::size_t out = std::size_t(q.shape(0)), in = std::size_t(q.shape(1));
            if (!scale || scale.ndim() != 1 || std::size_t(scale.shape(0)) != out)
                throw ct::ValueError("scale: expected a float32 array of shape (" + std::to_string(out) + ",)");
            return std::make_shared<ct::Int8Weight>(ct::pack_weight_int8(q.data(), scale.data(), out, in));
        }), py::arg("q"), py::arg("scale"), "From q (out, in) int8 in [-127, 127] and scale (out,): w ~ q * scale[:, None].")
        .def_readonly("out_features", &ct::Int8Weight::out_features)
        .def_readonly("in_features", &ct::Int8Weight::in_features)
        .def_property_readonly("q", [](const ct::Int8Weight& w) {
            I8 out({py::ssize_t(w.out_features), py::ssize_t(w.in_features)});
            const std::vector<std::int8_t> q = w.unpacked();
            std::copy(q.begin(), q.end(), out.mutable_data());
            return out;
        }, "The int8 values (out, in), unpacked.")
        .def_property_readonly("scale", [](const ct::Int8Weight& w) { return as_array(w.scale); }, "(out,) float32.")
        .def("dequantize", [](const ct::Int8Weight& w) {
            F32 out({py::ssize_t(w.out_features), py::ssize_t(w.in_features)});
            const std::vector<float> values = w.dequantized();
            std::copy(values.begin(), values.end(), out.mutable_data());
            return out;
        }, "q * scale[:, None] as float32.");

    m.def("quantize_weight", [](py::handle w_obj) {
        F32 w = matrix(w_obj, "weight", false);
        const std::size_t out = std::size_t(w.shape(0)), in = std::size_t(w.shape(1));
        py::gil_scoped_release release;
        return std::make_shared<ct::Int8Weight>(ct::quantize_weight_int8(w.data(), out, in));
    }, py::arg("weight"), "weight (out, in) quantised per output row: scale = amax / 127, q = rint(w * (127 / amax)).");
    m.def("quantize_rows", [](py::handle x_obj) {
        F32 x = matrix(x_obj, "x", false);
        const std::size_t rows = std::size_t(x.shape(0)), cols = std::size_t(x.shape(1));
        I8 q({py::ssize_t(rows), py::ssize_t(cols)});
        F32 scale(py::ssize_t{py::ssize_t(rows)});
        {
            py::gil_scoped_release release;
            ct::quantize_rows_int8(x.data(), rows, cols, cols, q.mutable_data(), scale.mutable_data());
        }
        return py::make_tuple(q, scale);
    }, py::arg("x"), "(q, scale): each row of x quantised as linear_int8 quantises activations, by the kernel in use.");
    m.def("matmul_s32", [](py::handle qx_obj, const ct::Int8Weight& w) {
        I8 qx = matrix(qx_obj, "qx", true);
        if (std::size_t(qx.shape(1)) != w.in_features)
            throw ct::ValueError("qx: expected " + std::to_string(w.in_features) + " columns (in_features), got " +
                                 std::to_string(qx.shape(1)));
        const std::size_t m_rows = std::size_t(qx.shape(0));
        std::vector<std::int32_t> acc;
        {
            py::gil_scoped_release release;
            acc = ct::matmul_int8_s32(m_rows, qx.data(), w);
        }
        I32 out({py::ssize_t(m_rows), py::ssize_t(w.out_features)});
        std::copy(acc.begin(), acc.end(), out.mutable_data());
        return out;
    }, py::arg("qx"), py::arg("weight"), "The exact int32 products qx @ weight.q.T, through the kernel in use.");
    m.def("linear", [](py::handle x_obj, const ct::Int8Weight& w, py::object bias_obj, double alpha) {
        F32 x = matrix(x_obj, "x", false);
        if (std::size_t(x.shape(1)) != w.in_features)
            throw ct::ValueError("x: expected " + std::to_string(w.in_features) + " columns (in_features), got " +
                                 std::to_string(x.shape(1)));
        F32 bias;
        if (!bias_obj.is_none()) {
            bias = F32::ensure(py::module_::import("numpy").attr("asarray")(bias_obj));
            if (!bias || bias.ndim() != 1 || std::size_t(bias.shape(0)) != w.out_features)
                throw ct::ValueError("bias: expected shape (" + std::to_string(w.out_features) + ",)");
        }
        const std::size_t rows = std::size_t(x.shape(0));
        F32 y({py::ssize_t(rows), py::ssize_t(w.out_features)});
        const float* pb = bias_obj.is_none() ? nullptr : bias.data();
        float* py_ = y.mutable_data();
        {
            py::gil_scoped_release release;
            ct::linear_int8(rows, x.data(), w.in_features, w, float(alpha), pb, py_, w.out_features);
        }
        return y;
    }, py::arg("x"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("alpha") = 1.0,
       "x (m, in) @ W^T (+ bias) in int8: x's rows quantised on the fly, int32 sums, one float32 scale per element.");
    m.def("int8_kernel", &ct::int8_kernel, "The int8 kernel in use: 'avx512_vnni', 'avx_vnni', 'avx2', 'i8mm', 'dotprod', 'neon' (aarch64) or 'portable'.");
    m.def("set_int8_kernel", &ct::set_int8_kernel, py::arg("name"),
          "'auto' (the CPU's best) or one of int8_kernels_available().");
    m.def("int8_kernels_available", &ct::int8_kernels_available, "The int8 kernels this CPU can run, best first.");
}

}  // namespace ctpy
