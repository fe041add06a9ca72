// ctransformer._core.distributed: the process group, the gradient reducer and batch shards.
// Python's ctransformer.distributed wraps these with torch.distributed's names.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>

#include "bindings.hpp"
#include "convert.hpp"
#include "ctransformer/distributed/batch_shard.hpp"
#include "ctransformer/distributed/gradient_reducer.hpp"
#include "ctransformer/distributed/process_group.hpp"
#include "ctransformer/error.hpp"

namespace ctpy {

namespace {

using ct::distributed::BatchShardGuard;
using ct::distributed::GradientReducer;
using ct::distributed::ProcessGroup;

// The guard as a Python context manager: `with BatchShard(begin, rows, global_rows): ...`.
struct PyBatchShard {
    std::int64_t begin = 0, rows = 0, global_rows = 0;
    std::optional<BatchShardGuard> guard;
};

}  // namespace

void bind_distributed(py::module_& m) {
    m.def("is_available", &ct::distributed::available,
          "True when this build has MPI (CTRANSFORMER_MPI): data-parallel training across processes.");
    m.def("init", [] {
        ProcessGroup& group = ProcessGroup::world();
        return py::make_tuple(group.rank(), group.size());
    }, "Join the job's processes (MPI_COMM_WORLD; started by mpirun) and return (rank, world_size). "
       "Idempotent. RuntimeError when the build has no MPI.");
    m.def("all_reduce", [](py::array array) {
        if (!(array.flags() & py::array::c_style) || !array.writeable())
            throw ct::ValueError("all_reduce: array must be a writeable, C-contiguous NumPy array (it is summed in place)");
        ProcessGroup& group = ProcessGroup::world();
        if (py::isinstance<py::array_t<float>>(array) && array.dtype().is(py::dtype::of<float>())) {
            float* data = static_cast<float*>(array.mutable_data());
            py::gil_scoped_release release;
            group.all_reduce_sum(data, std::size_t(array.size()));
        } else if (array.dtype().is(py::dtype::of<double>())) {
            double* data = static_cast<double*>(array.mutable_data());
            py::gil_scoped_release release;
            group.all_reduce_sum(data, std::size_t(array.size()));
        } else {
            throw ct::TypeError("all_reduce: array must be float32 or float64, got " +
                                py::str(array.dtype()).cast<std::string>());
        }
    }, py::arg("array"), "Sum `array` over every process, in place (MPI_Allreduce).");
    m.def("broadcast_bytes", [](py::bytes data, Int root) {
        ProcessGroup& group = ProcessGroup::world();
        const std::int64_t r = to_int(root, "broadcast_bytes: root");
        if (r < 0 || r >= group.size())
            throw ct::ValueError("broadcast_bytes: root must be a rank in [0, " + std::to_string(group.size() - 1) +
                                 "], got " + std::to_string(r));
        std::string text = data;
        std::vector<char> bytes(text.begin(), text.end());
        {
            py::gil_scoped_release release;
            group.broadcast(bytes, int(r));
        }
        return py::bytes(bytes.data(), bytes.size());
    }, py::arg("data"), py::arg("root") = 0, "Rank `root`'s bytes, on every process (MPI_Bcast).");
    m.def("barrier", [] {
        ProcessGroup& group = ProcessGroup::world();
        py::gil_scoped_release release;
        group.barrier();
    }, "Wait until every process gets here.");
    m.def("abort", [](const std::string& message, Int code) {
        const std::int64_t c = to_int(code, "abort: code");
        ProcessGroup::world().abort(message, int(c));
    }, py::arg("message"), py::arg("code") = 1,
       "Print `message` with this rank on stderr and stop every process of the job (MPI_Abort).");

    py::class_<GradientReducer>(m, "GradientReducer", R"doc(Gradient averaging over every process, overlapped with backward.

Buckets of about `bucket_bytes` (reverse parameter order) start a non-blocking all-reduce as soon as
backward has completed their gradients; when backward returns, every process holds the average.
Construction broadcasts rank 0's parameter values to every process.)doc")
        .def(py::init([](py::object parameters, Int bucket_bytes) {
            std::vector<ct::Tensor> params = to_tensor_list(parameters, "GradientReducer: parameters", false);
            const std::size_t bytes = std::size_t(to_int_at_least(bucket_bytes, "GradientReducer: bucket_bytes", 1));
            ProcessGroup& group = ProcessGroup::world();
            py::gil_scoped_release release;
            return std::make_unique<GradientReducer>(std::move(params), group, bytes);
        }), py::arg("parameters"), py::arg("bucket_bytes") = 1 << 20)
        .def("stats", [](const GradientReducer& r) {
            const GradientReducer::Stats& s = r.stats();
            py::dict d;
            d["buckets"] = s.buckets;
            d["bytes"] = s.bytes;
            d["bucket_bytes"] = s.bucket_bytes;
            d["steps"] = s.steps;
            d["wait_seconds"] = s.wait_seconds;
            return d;
        }, "buckets and bytes all-reduced per step (bucket_bytes: each bucket's, in the order they start), "
           "backward passes reduced, and the seconds backward's end spent waiting for communication (summed).")
        .def("reset_stats", &GradientReducer::reset_stats)
        .def_property_readonly("bucket_of", &GradientReducer::bucket_of,
                               "The bucket of each (distinct) parameter, in parameter order.");

    py::class_<PyBatchShard>(m, "BatchShard", R"doc(`with BatchShard(begin, rows, global_rows):` this thread runs rows
[begin, begin + rows) of a global batch of `global_rows`, padded to the global batch's lengths: dropout
then draws exactly those rows of the mask one process would draw for the whole batch.)doc")
        .def(py::init([](Int begin, Int rows, Int global_rows) {
            auto shard = std::make_unique<PyBatchShard>();
            shard->begin = to_int(begin, "BatchShard: begin");
            shard->rows = to_int(rows, "BatchShard: rows");
            shard->global_rows = to_int(global_rows, "BatchShard: global_rows");
            return shard;
        }), py::arg("begin"), py::arg("rows"), py::arg("global_rows"))
        .def("__enter__", [](PyBatchShard& s) -> PyBatchShard& {
            if (s.guard) throw ct::RuntimeError("BatchShard: already entered");
            s.guard.emplace(s.begin, s.rows, s.global_rows);
            return s;
        }, py::return_value_policy::reference)
        .def("__exit__", [](PyBatchShard& s, py::object, py::object, py::object) {
            s.guard.reset();
            return false;
        }, py::arg("exc_type") = py::none(), py::arg("exc_value") = py::none(), py::arg("traceback") = py::none());
}

}  // namespace ctpy
