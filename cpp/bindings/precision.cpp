// ctransformer._core.amp: bf16 rounding, the bf16 GEMM (for tests and benchmarks), and autocast regions
// (ctransformer.autocast wraps them in a context manager).
#include <pybind11/numpy.h>

#include <cmath>
#include <optional>

#include "bindings.hpp"
#include "ctransformer/autocast.hpp"
#include "ctransformer/bf16.hpp"
#include "ctransformer/error.hpp"

namespace ctpy {

namespace {

using F32 = py::array_t<float, py::array::c_style | py::array::forcecast>;
using U16 = py::array_t<std::uint16_t, py::array::c_style>;

// A gemm operand from Python: a 2-D float32 array, or a 2-D uint16 array of bf16 bits.
struct Operand {
    py::array keep;
    ct::Bf16Operand op;
    std::size_t rows = 0, cols = 0;  // of op(X)
};

Operand operand(const py::handle& obj, bool trans, const char* arg) {
    py::array a = py::module_::import("numpy").attr("asarray")(obj).cast<py::array>();
    if (a.ndim() != 2)
        throw ct::ValueError(std::string(arg) + ": expected a 2-D array, got " + std::to_string(a.ndim()) + " dimensions");
    Operand o;
    const auto r = std::size_t(a.shape(0)), c = std::size_t(a.shape(1));
    if (r > (1u << 30) || c > (1u << 30)) throw ct::ValueError(std::string(arg) + ": too large for the bf16 GEMM");
    if (a.dtype().is(py::dtype::of<std::uint16_t>())) {
        U16 u = U16::ensure(a);
        o.op = ct::Bf16Operand::bf16(u.data(), int(c), trans);
        o.keep = u;
    } else if (a.dtype().kind() == 'f') {
        F32 f = F32::ensure(a);
        for (py::ssize_t i = 0; i < f.size(); ++i)
            if (std::isnan(f.data()[i]))
                throw ct::ValueError(std::string(arg) + ": contains NaN at flat position " + std::to_string(i));
        o.op = ct::Bf16Operand::fp32(f.data(), int(c), trans);
        o.keep = f;
    } else {
        throw ct::TypeError(std::string(arg) + ": expected float32 values or uint16 bf16 bits, got dtype " +
                            py::str(a.dtype()).cast<std::string>());
    }
    o.rows = trans ? c : r;
    o.cols = trans ? r : c;
    return o;
}

// A Python `with` region around autocast::Guard.
struct Region {
    explicit Region(bool enabled) : on(enabled) {}
    bool on;
    std::optional<ct::autocast::Guard> guard;
};

}  // namespace

void bind_precision(py::module_& m) {
    m.def("round_to_bf16", [](F32 x) {
        U16 out(std::vector<py::ssize_t>(x.shape(), x.shape() + x.ndim()));
        {
            py::gil_scoped_release release;
            ct::round_to_bf16(x.data(), out.mutable_data(), std::size_t(x.size()));
        }
        return out;
    }, py::arg("x"), "x rounded to bfloat16 (round to nearest even, as torch; NaN -> 0x7FC0), as uint16 bits.");
    m.def("widen_bf16", [](U16 bits) {
        F32 out(std::vector<py::ssize_t>(bits.shape(), bits.shape() + bits.ndim()));
        ct::widen_bf16(bits.data(), out.mutable_data(), std::size_t(bits.size()));
        return out;
    }, py::arg("bits"), "bfloat16 bits (uint16) as float32 values (exact).");
    m.def("gemm_bf16", [](py::handle a, py::handle b, bool trans_a, bool trans_b, double alpha, py::object c,
                          py::object out_obj) {
        Operand A = operand(a, trans_a, "a"), B = operand(b, trans_b, "b");
        if (A.cols != B.rows)
            throw ct::ValueError("gemm_bf16: op(a) is " + std::to_string(A.rows) + " x " + std::to_string(A.cols) +
                                 " but op(b) is " + std::to_string(B.rows) + " x " + std::to_string(B.cols) +
                                 "; their inner sizes must agree");
        F32 out;
        float beta = 0.0f;
        if (!out_obj.is_none()) {  // written in place (benchmarks: no fresh pages per call)
            if (!c.is_none()) throw ct::ValueError("gemm_bf16: give c or out, not both");
            if (!py::isinstance<F32>(out_obj))
                throw ct::TypeError("out: expected a float32 array");
            out = out_obj.cast<F32>();
            if (out.ndim() != 2 || std::size_t(out.shape(0)) != A.rows || std::size_t(out.shape(1)) != B.cols ||
                !(out.flags() & py::array::c_style) || !out.writeable())
                throw ct::ValueError("out: expected a writable C-contiguous float32 array of shape (" +
                                     std::to_string(A.rows) + ", " + std::to_string(B.cols) + ")");
        } else if (c.is_none()) {
            out = F32({py::ssize_t(A.rows), py::ssize_t(B.cols)});
        } else {
            F32 given = F32::ensure(c);
            if (!given || given.ndim() != 2 || std::size_t(given.shape(0)) != A.rows || std::size_t(given.shape(1)) != B.cols)
                throw ct::ValueError("c: expected a float32 array of shape (" + std::to_string(A.rows) + ", " +
                                     std::to_string(B.cols) + ")");
            out = F32({py::ssize_t(A.rows), py::ssize_t(B.cols)});
            std::copy_n(given.data(), given.size(), out.mutable_data());
            beta = 1.0f;
        }
        float* pc = out.mutable_data();
        {
            py::gil_scoped_release release;
            ct::gemm_bf16(int(A.rows), int(B.cols), int(A.cols), float(alpha), A.op, B.op, beta, pc, int(B.cols));
        }
        return out;
    }, py::arg("a"), py::arg("b"), py::arg("trans_a") = false, py::arg("trans_b") = false, py::arg("alpha") = 1.0,
       py::arg("c") = py::none(), py::arg("out") = py::none(),
       "alpha op(a) @ op(b) (+ c), written to a new array or to out, with op(a), op(b) rounded to bf16 and fp32 accumulation: the product autocast "
       "uses. a and b are float32 arrays or uint16 bf16 bits; op(x) is x.T when trans_x.");
    m.def("bf16_kernel", &ct::bf16_kernel, "The bf16 GEMM kernel in use: 'amx_bf16', 'avx512_bf16', 'neon_bf16' (aarch64) or 'emulated'.");
    m.def("set_bf16_kernel", &ct::set_bf16_kernel, py::arg("name"),
          "'auto' (the CPU's best), 'amx_bf16', 'avx512_bf16', 'neon_bf16' or 'emulated' (bf16-rounded operands through the BLAS's sgemm).");

    py::class_<Region>(m, "AutocastRegion", "One `with` region of autocast (ctransformer.autocast wraps it).")
        .def(py::init<bool>(), py::arg("enabled"))
        .def("__enter__", [](Region& r) {
            if (r.guard) throw ct::RuntimeError("autocast: this region is already entered");
            r.guard.emplace(r.on);
            return &r;
        }, py::return_value_policy::reference)
        .def("__exit__", [](Region& r, py::args) { r.guard.reset(); });
    m.def("is_autocast_enabled", &ct::autocast::enabled, "Whether this thread is inside a bf16 autocast region.");
    m.def("autocast_cache_size", &ct::autocast::cached_count, "How many parameters have a cached bf16 copy.");
    m.def("clear_autocast_cache", &ct::autocast::clear_cache, "Forget the cached bf16 copies of the parameters.");
}

}  // namespace ctpy
