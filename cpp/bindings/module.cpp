// ctransformer._core: the pybind11 layer over the C++ core. The maths lives in cpp/src.
#include "bindings.hpp"
#include "convert.hpp"
#include "ctransformer/runtime/allocator.hpp"
#include "ctransformer/blas_info.hpp"
#include "ctransformer/build_info.hpp"
#include "ctransformer/runtime/cpu_features.hpp"
#include "ctransformer/error.hpp"
#include "ctransformer/kernels/level.hpp"
#include "ctransformer/runtime/random.hpp"
#include "ctransformer/runtime/threads.hpp"

#include <pybind11/stl.h>

#include <optional>
#include <utility>

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
    m.doc() = "ctransformer's C++ core: tensors, autograd and the functional ops.";
    // ValueError, IndexError and RuntimeError map through their std bases; TypeError needs this.
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const ct::TypeError& e) {
            PyErr_SetString(PyExc_TypeError, e.what());
        } catch (const ct::MemoryError& e) {   // names what was allocated (shape, bytes)
            PyErr_SetString(PyExc_MemoryError, e.what());
        } catch (const std::bad_alloc&) {      // from a container of the core: at least say where it came from
            PyErr_SetString(PyExc_MemoryError, "out of memory: ctransformer's C++ core could not allocate a buffer "
                                               "(std::bad_alloc); the request needs more memory than is free");
        }
    });
    m.def("manual_seed", [](ctpy::Int seed) {
        // As torch: any int in [-2**63, 2**64 - 1], a negative one taken modulo 2**64.
        const std::string what = "manual_seed: seed";
        if (PyIndex_Check(seed.ptr()) && !py::isinstance<py::bool_>(seed) && py::int_(seed) >= py::int_(0)) {
            const unsigned long long v = PyLong_AsUnsignedLongLong(py::int_(seed).ptr());
            if (PyErr_Occurred()) {
                PyErr_Clear();
                throw ct::ValueError(what + " = " + py::str(seed).cast<std::string>() +
                                     " is out of range (expected an integer between -2**63 and 2**64 - 1)");
            }
            ct::manual_seed(std::uint64_t(v));
            return;
        }
        ct::manual_seed(std::uint64_t(ctpy::to_int(seed, what)));
    }, py::arg("seed"),
          "Seed the generator behind parameter initialisation and dropout.");
    m.def("get_rng_state", &ct::get_rng_state, "The generator's state (a string), for set_rng_state.");
    m.def("set_rng_state", &ct::set_rng_state, py::arg("state"), "Restore a state from get_rng_state().");
    m.def("set_num_threads", [](py::object n) {
        const std::int64_t v = ctpy::to_int(n, "set_num_threads: n");
        if (v < 1 || v > 1024)   // the core's range (blas.cpp), checked before the narrowing to int
            throw ct::ValueError("set_num_threads: n must be >= 1 and at most 1024, got " + std::to_string(v));
        ct::set_num_threads(int(v));
    }, py::arg("n"),
          "Threads used by the library: BLAS products and ct's own kernels alike.");
    m.def("memory_stats", [] {
        const ct::AllocatorStats s = ct::allocator_stats();
        py::dict d;
        d["live_bytes"] = s.live_bytes;
        d["cached_bytes"] = s.cached_bytes;
        d["peak_bytes"] = s.peak_bytes;
        d["system_allocs"] = s.system_allocs;
        d["cache_hits"] = s.cache_hits;
        d["cache_limit"] = ct::cache_limit();
        return d;
    }, "The tensor allocator's counters: bytes held by tensors (live) and kept for reuse (cached), the peak of "
       "their sum since reset_peak_memory_stats(), and how many blocks came from the system vs the cache.");
    m.def("reset_peak_memory_stats", &ct::reset_peak_allocator_stats);
    m.def("empty_cache", &ct::empty_cache, "Return every cached tensor buffer to the system.");
    m.def("set_cache_limit", [](py::object bytes) { ct::set_cache_limit(ctpy::to_size(bytes, "set_cache_limit: bytes")); },
          py::arg("bytes"),
          "Most bytes of freed tensor buffers kept for reuse (default 1 GiB or CTRANSFORMER_CACHE_LIMIT_MB).");
    m.def("get_num_threads", &ct::get_num_threads);
    m.def("build_info", [] {
        const ct::BuildInfo b = ct::build_info();
        py::dict d;
        d["march"] = b.march;
        d["simd"] = b.simd;
        d["float_lanes"] = b.float_lanes;
        d["fused_multiply_add"] = b.fused_multiply_add;
        d["masked_tails"] = b.masked_tails;
        d["mpi"] = b.mpi;
        const ct::BlasInfo blas = ct::blas_info();
        py::dict bd;
        for (const auto& [name, value] : {std::pair<const char*, const std::string*>{"name", &blas.name},
                                          {"version", &blas.version}, {"source", &blas.source},
                                          {"library", &blas.library}, {"core", &blas.core},
                                          {"core_level", &blas.core_level}, {"config", &blas.config}})
            bd[name] = *value;
        bd["threads"] = blas.threads;
        d["blas"] = bd;
        const ct::CpuFeatures& cpu = ct::cpu_features();
        py::dict cd;
        cd["vendor"] = cpu.vendor;
        cd["simd_level"] = cpu.simd_level;
        const std::pair<const char*, bool> flags[] = {
            {"avx2", cpu.avx2}, {"fma", cpu.fma}, {"avx512f", cpu.avx512f}, {"avx512_vnni", cpu.avx512_vnni},
            {"avx_vnni", cpu.avx_vnni}, {"avx512_bf16", cpu.avx512_bf16}, {"avx512_fp16", cpu.avx512_fp16},
            {"amx_tile", cpu.amx_tile}, {"amx_bf16", cpu.amx_bf16}, {"amx_int8", cpu.amx_int8},
            {"dotprod", cpu.dotprod}, {"i8mm", cpu.i8mm}, {"bf16", cpu.bf16}, {"sve", cpu.sve}};
        for (const auto& [name, on] : flags) cd[name] = on;
        cd["level_cap"] = cpu.level_cap;
        d["cpu"] = cd;
        const ct::kernels::LoopArch loops = ct::kernels::loop_arch();
        py::dict ld;
        ld["level"] = ct::kernels::level_name(ct::kernels::kernel_level());
        ld["simd"] = loops.simd;
        ld["float_lanes"] = loops.float_lanes;
        ld["fused_multiply_add"] = loops.fused_multiply_add;
        d["loops"] = ld;
        return d;
    }, "What the core was compiled for (-march, the kernels' instruction set and vector width, whether "
       "multiply-adds are fused and vector tails masked, whether MPI is built in); the BLAS it runs on (blas: "
       "name, version, source, library path, the kernel core OpenBLAS picked at run time, threads); and what "
       "this CPU offers (cpu: its best SIMD level, VNNI, BF16, AMX; on aarch64 dotprod, i8mm, bf16, sve), read at run time, and level_cap: the "
       "environment's CTRANSFORMER_KERNEL_LEVEL, which caps all of it as on a CPU of that level); and loops: what "
       "the SIMD loops of the kernel level in force were compiled for (their instruction set, vector width and "
       "fused multiply-add; simd, float_lanes and fused_multiply_add above are the rest of the build's).");
    m.def("kernel_level", [] { return ct::kernels::level_name(ct::kernels::kernel_level()); },
          "The kernel level in force: 'portable', 'avx2', 'avx2_vnni', 'avx512', 'avx512_vnni' or 'avx512_bf16' "
          "on x86-64, 'portable', 'dotprod' or 'i8mm_bf16' on aarch64 (the CPU's best unless set_kernel_level or CTRANSFORMER_KERNEL_LEVEL chose less).");
    m.def("kernel_levels", &ct::kernels::kernel_levels, "Every kernel level this CPU runs, best first.");
    m.def("set_kernel_level", &ct::kernels::set_kernel_level, py::arg("level"),
          "Run the kernels of `level` from the next product on, in the whole process: one of kernel_levels(), an "
          "x86-64 level ('x86-64-v3' = 'avx2', 'x86-64-v4' = 'avx512') or 'auto' (the CPU's best). Every level "
          "gives the same numbers within float32's summation-order bound (int8: the same bits). It also ends a "
          "choice made by quantization.set_int8_kernel or amp.set_bf16_kernel. A level this CPU cannot run is a "
          "ValueError.");
    m.def("_kernel_table", [](std::optional<std::string> level) {
        py::list rows;
        for (const ct::kernels::KernelRow& r : level ? ct::kernels::kernel_table(ct::kernels::parse_level(*level))
                                                     : ct::kernels::kernel_table()) {
            py::dict d;
            d["key"] = r.key;
            d["product"] = r.product;
            d["kernel"] = r.kernel;
            d["when"] = r.when;
            rows.append(d);
        }
        return rows;
    }, py::arg("level") = py::none(),
       "One dict per product: its key, what it is, the kernel it runs at the level in force (or at `level`), and "
       "when (sizes, threads).");
    m.def("_blas_core_advice", &ct::blas_core_advice,
          "'' when OpenBLAS's kernels use what this CPU offers; else what is slower and the one-line fix.");
    ctpy::bind_tensor(m);
    auto functional = m.def_submodule("functional", "Functional ops, each with its backward.");
    ctpy::bind_functional(functional);
    // Before nn: Linear.set_int8_weight takes a quantization.Int8Weight, whose Python name its signature needs.
    auto quantization = m.def_submodule("quantization", "int8: quantised weights, the int8 product and its kernels.");
    ctpy::bind_quantization(quantization);
    auto nn = m.def_submodule("nn", "Modules: layers and models with named parameters.");
    ctpy::bind_nn_module(nn);
    ctpy::bind_nn_gpt(nn);
    ctpy::bind_nn_transformer(nn);
    auto optim = m.def_submodule("optim", "Optimizers, learning-rate schedules and gradient clipping.");
    ctpy::bind_optim(optim);
    auto loss = m.def_submodule("loss", "Loss modules with state (the Annotated Transformer's LabelSmoothing).");
    ctpy::bind_loss(loss);
    auto decode = m.def_submodule("decode", "Greedy decoding, beam search and GPT generation with key/value caches.");
    ctpy::bind_decode(decode);
    auto distributed = m.def_submodule("distributed", "Data-parallel training over MPI: the process group, "
                                                      "gradient averaging overlapped with backward, batch shards.");
    ctpy::bind_distributed(distributed);
    auto amp = m.def_submodule("amp", "Mixed precision: bf16 rounding, the bf16 GEMM and autocast regions.");
    ctpy::bind_precision(amp);
    auto serve = m.def_submodule("serve", "Continuous batching of translation requests for a server.");
    ctpy::bind_serve(serve);
}
