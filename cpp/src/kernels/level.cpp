// The kernel level (ctransformer/kernels/level.hpp) and what each product runs at it (dispatch.hpp).
#include "ctransformer/kernels/level.hpp"

#include <atomic>
#include <cstdio>

#include "ctransformer/blas_info.hpp"
#include "ctransformer/build_info.hpp"
#include "ctransformer/runtime/cpu_features.hpp"
#include "ctransformer/error.hpp"
#include "bf16/gemm_kernels.hpp"
#include "dispatch.hpp"
#include "simd/arch.hpp"
#include "simd/tables.hpp"
#include "split.hpp"

namespace ct::kernels {

namespace {

// Each architecture's levels in rising order (a CPU runs one architecture's: best_level takes the last it runs).
constexpr Level kLevels[] = {Level::Portable,   Level::Avx2,       Level::Avx2Vnni, Level::Avx512,  Level::Avx512Vnni,
                             Level::Avx512Bf16, Level::Amx,        Level::Dotprod,  Level::I8mmBf16};

std::atomic<int>& current() {
    static std::atomic<int> level{int(best_level())};
    return level;
}

// -1: the product follows the level; otherwise its kernel, chosen by set_int8_kernel / set_bf16_kernel.
std::atomic<int> g_int8_choice{-1};
std::atomic<int> g_bf16_choice{-1};

}  // namespace

std::string level_name(Level level) {
    switch (level) {
        case Level::Portable: return "portable";
        case Level::Avx2: return "avx2";
        case Level::Avx2Vnni: return "avx2_vnni";
        case Level::Avx512: return "avx512";
        case Level::Avx512Vnni: return "avx512_vnni";
        case Level::Avx512Bf16: return "avx512_bf16";
        case Level::Amx: return "amx";
        case Level::Dotprod: return "dotprod";
        case Level::I8mmBf16: return "i8mm_bf16";
    }
    return "?";
}

Level parse_level(const std::string& name) {
    for (Level l : kLevels)
        if (name == level_name(l)) return l;
    if (name == "x86-64" || name == "x86-64-v2") return Level::Portable;
    if (name == "x86-64-v3") return Level::Avx2;
    if (name == "x86-64-v4") return Level::Avx512;
    std::string names;
    for (Level l : kLevels) names += level_name(l) + ", ";
    throw ValueError("kernel level must be one of " + names + "x86-64, x86-64-v2, x86-64-v3 or x86-64-v4, got '" +
                     name + "'");
}

bool cpu_runs(Level level) {
    const CpuFeatures& f = cpu_features();
    const bool avx2 = f.avx2 && f.fma, avx512 = f.simd_level == "avx512";  // F, BW, DQ and VL
    switch (level) {
        case Level::Portable: return true;
        case Level::Avx2: return avx2;
        case Level::Avx2Vnni: return avx2 && f.avx_vnni;
        case Level::Avx512: return avx512;
        case Level::Avx512Vnni: return avx512 && f.avx512_vnni;
        case Level::Avx512Bf16: return avx512 && f.avx512_vnni && f.avx512_bf16;
        case Level::Amx: return avx512 && f.avx512_vnni && f.avx512_bf16 && f.amx_bf16 && f.amx_int8 &&
                              bf16_kernels::amx_bf16_permitted();
        case Level::Dotprod: return f.dotprod;
        case Level::I8mmBf16: return f.dotprod && f.i8mm && f.bf16;
    }
    return false;
}

Level best_level() {
    Level best = Level::Portable;
    for (Level l : kLevels)
        if (cpu_runs(l)) best = l;
    return best;
}

std::vector<std::string> kernel_levels() {
    std::vector<std::string> names;
    for (auto it = std::rbegin(kLevels); it != std::rend(kLevels); ++it)
        if (cpu_runs(*it)) names.push_back(level_name(*it));
    return names;
}

Level kernel_level() { return Level(current().load(std::memory_order_relaxed)); }

void set_kernel_level(const std::string& name) {
    Level level;
    try {
        level = name == "auto" ? best_level() : parse_level(name);
    } catch (const ValueError& e) {
        throw ValueError(std::string("set_kernel_level: ") + e.what());
    }
    if (!cpu_runs(level)) {
        std::string have;
        for (const std::string& l : kernel_levels()) have += (have.empty() ? "" : ", ") + l;
        throw ValueError("set_kernel_level: this CPU cannot run level '" + name + "'; it runs " + have +
                         " (or 'auto')");
    }
    current() = int(level);
    g_int8_choice = -1;
    g_bf16_choice = -1;
}

// --- what each product runs -------------------------------------------------------------------------------

FloatKernel float_kernel_at(Level level) {
    switch (level) {
        case Level::Avx2:
        case Level::Avx2Vnni: return FloatKernel::Avx2;
        case Level::Avx512:
        case Level::Avx512Vnni:
        case Level::Avx512Bf16:
        case Level::Amx: return FloatKernel::Avx512;
        default: return FloatKernel::Blas;  // portable, and aarch64's levels: OpenBLAS's own NEON kernels
    }
}

Int8Kernel int8_kernel_at(Level level) {
    switch (level) {
#if defined(__aarch64__)
        case Level::Portable: return Int8Kernel::Neon;   // NEON is every aarch64 CPU's
#else
        case Level::Portable: return Int8Kernel::Portable;
#endif
        case Level::Avx2: return Int8Kernel::Avx2;
        case Level::Avx2Vnni: return Int8Kernel::AvxVnni;
        case Level::Avx512: return Int8Kernel::Avx2;  // AVX-512 without VNNI (Skylake-X): no 512-bit int8 kernel
        case Level::Avx512Vnni:
        case Level::Avx512Bf16: return Int8Kernel::Avx512Vnni;
        case Level::Amx: return Int8Kernel::AmxInt8;
        case Level::Dotprod: return Int8Kernel::Dotprod;
        case Level::I8mmBf16: return Int8Kernel::I8mm;
    }
    return Int8Kernel::Portable;
}

Bf16Kernel bf16_kernel_at(Level level) {
    switch (level) {
        case Level::Avx512Bf16: return Bf16Kernel::Avx512Bf16;
        case Level::Amx: return Bf16Kernel::AmxBf16;
        case Level::I8mmBf16: return Bf16Kernel::NeonBf16;
        default: return Bf16Kernel::Emulated;
    }
}

FloatKernel float_kernel() { return float_kernel_at(kernel_level()); }

const void* table_for_level(const void* portable, const void* avx2, const void* avx512) {
    switch (float_kernel()) {
        case FloatKernel::Avx512: return avx512;
        case FloatKernel::Avx2: return avx2;
        case FloatKernel::Blas: break;
    }
    return portable;
}

Int8Kernel int8_kernel() {
    const int chosen = g_int8_choice.load(std::memory_order_relaxed);
    return chosen >= 0 ? Int8Kernel(chosen) : int8_kernel_at(kernel_level());
}

Bf16Kernel bf16_kernel() {
    const int chosen = g_bf16_choice.load(std::memory_order_relaxed);
    return chosen >= 0 ? Bf16Kernel(chosen) : bf16_kernel_at(kernel_level());
}

void choose_int8_kernel(Int8Kernel k) { g_int8_choice = int(k); }
void choose_bf16_kernel(Bf16Kernel k) { g_bf16_choice = int(k); }
void follow_level_for_int8() { g_int8_choice = -1; }
void follow_level_for_bf16() { g_bf16_choice = -1; }

std::string kernel_name(FloatKernel k) {
    switch (k) {
        case FloatKernel::Blas: return "OpenBLAS";
        case FloatKernel::Avx2: return "avx2";
        case FloatKernel::Avx512: return "avx512";
    }
    return "?";
}

std::string kernel_name(Int8Kernel k) {
    switch (k) {
        case Int8Kernel::Portable: return "portable";
        case Int8Kernel::Avx2: return "avx2";
        case Int8Kernel::AvxVnni: return "avx_vnni";
        case Int8Kernel::Avx512Vnni: return "avx512_vnni";
        case Int8Kernel::AmxInt8: return "amx_int8";
        case Int8Kernel::Dotprod: return "dotprod";
        case Int8Kernel::I8mm: return "i8mm";
        case Int8Kernel::Neon: return "neon";
    }
    return "?";
}

std::string kernel_name(Bf16Kernel k) {
    switch (k) {
        case Bf16Kernel::Avx512Bf16: return "avx512_bf16";
        case Bf16Kernel::AmxBf16: return "amx_bf16";
        case Bf16Kernel::NeonBf16: return "neon_bf16";
        case Bf16Kernel::Emulated: break;
    }
    return "emulated";
}

// --- the table --------------------------------------------------------------------------------------------

namespace {

const LoopArchTable& loop_arch_at(FloatKernel k) {
#if defined(__x86_64__)
    if (k == FloatKernel::Avx512) return loop_arch_table_avx512;
    if (k == FloatKernel::Avx2) return loop_arch_table_avx2;
#endif
    (void)k;
    return loop_arch_table_portable;
}

std::vector<KernelRow> table(FloatKernel fk, Int8Kernel ik, Bf16Kernel bk) {
    char mflop[32];
    std::snprintf(mflop, sizeof mflop, "%.1f", kSplitFlops / 1e6);
    const std::string split = "split over threads from " + std::string(mflop) + " MFLOP";
    const std::string weight_split = "split over threads from " + std::to_string(kSplitWeightBytes >> 10) +
                                     " KiB of weight";
    const std::string few = "1-" + std::to_string(kFewRows);
    const std::string xsimd = std::string("xsimd ") + loop_arch_at(fk).name;
    return {
        {"sgemm", "float32 product", "OpenBLAS sgemm (" + blas_info().core + ")",
         "above " + std::to_string(kDirectMacs) + " multiply-adds; " + split},
        {"small", "float32 small product", xsimd, "up to " + std::to_string(kDirectMacs) + " multiply-adds (no BLAS call)"},
        {"gemv", "float32 product of 1-" + std::to_string(kGemvRows) + " rows" +
                     (fk == FloatKernel::Blas ? std::string() : std::string(", other than x W^T")), "OpenBLAS sgemv", weight_split},
        {"few_rows", "float32 x W^T, " + few + " rows",
         fk == FloatKernel::Blas ? "OpenBLAS sgemv" : kernel_name(fk) + " few-rows", weight_split},
        {"packed", "float32 x W^T, packed weight", fk == FloatKernel::Blas ? "(not packed)" : kernel_name(fk) + " packed",
         "decoding (PackedWeights), " + std::to_string(kPackedMinRows) + "-" + std::to_string(kPackedMaxRows) +
             " rows, the weight's 2nd product on; " +
             "threads claim panels of 64 outputs, up to " + std::to_string(kPackedPiecesPerThread) + " pieces a thread"},
        {"bf16", "bf16 product", kernel_name(bk),
         bk == Bf16Kernel::NeonBf16
             ? split + ", by panels of 32 columns; every product packed"
             : split + "; x W^T up to " + std::to_string(kFewRows) + " rows unpacked (avx512_bf16), " + weight_split +
                   (bk == Bf16Kernel::AmxBf16 ? "; the rest in AMX tiles, by panels of 32 columns" : "")},
        {"int8", "int8 Linear", kernel_name(ik),
         "split over threads from " + std::to_string(kSplitInt8Macs >> 20) + "M multiply-adds, in panels of " +
             std::to_string(kInt8Panel) + " columns"},
        {"loops", "SIMD loops", xsimd,
         "softmax, layer_norm, GELU, ReLU, dropout, Adam, cross-entropy, attention's rows, decoding's searches"},
        {"build_loops", "element-wise arithmetic", build_info().simd + " (the build's -march)",
         "add, sub, mul, div with broadcasting, and the rest of the core"},
    };
}

}  // namespace

LoopArch loop_arch() {
    const LoopArchTable& t = loop_arch_table();
    return {t.name, t.float_lanes, t.fused_multiply_add};
}

std::vector<KernelRow> kernel_table() { return table(float_kernel(), int8_kernel(), bf16_kernel()); }

std::vector<KernelRow> kernel_table(Level level) {
    return table(float_kernel_at(level), int8_kernel_at(level), bf16_kernel_at(level));
}

}  // namespace ct::kernels
