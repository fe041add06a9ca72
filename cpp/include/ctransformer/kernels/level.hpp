// Which of the hand-written kernels run: one level for the whole process. It is detected once from
// cpu_features() (the CPU's best, or CTRANSFORMER_KERNEL_LEVEL's cap), and set_kernel_level lowers it at run
// time, so one machine runs, in one process, every kernel a smaller CPU would (the tests do).
//
// A level is a class of real CPUs, named by the instructions the kernels use. A CPU runs a level when it has
// every one of its features (and, for amx, Linux grants the process the tile state). Each product then takes the best kernel the level allows (kernel_table()):
//
//   level          float products      int8 Linear     bf16 products   CPUs
//   portable       OpenBLAS            portable        emulated        any x86-64 (SSE2), any aarch64 (NEON)
//   avx2           AVX2+FMA            avx2            emulated        Haswell, Zen 1-3
//   avx2_vnni      AVX2+FMA            avx_vnni        emulated        Alder Lake, Arrow Lake
//   avx512         AVX-512             avx2            emulated        Skylake-X
//   avx512_vnni    AVX-512             avx512_vnni     emulated        Cascade Lake, Ice Lake
//   avx512_bf16    AVX-512             avx512_vnni     avx512_bf16     Cooper Lake, Zen 4-5
//   amx            AVX-512             amx_int8        amx_bf16        Sapphire, Emerald and Granite Rapids
//   dotprod        OpenBLAS            dotprod         emulated        Graviton2, Ampere Altra, Apple M1 (aarch64)
//   i8mm_bf16      OpenBLAS            i8mm            neon_bf16        Graviton3-4, Neoverse N2/V1/V2, Apple M2+
//
// The SIMD loops (softmax, layer_norm, GELU, ReLU, dropout, Adam, cross-entropy, attention's rows, decoding's
// searches, the small products) are compiled once per level too (portable = SSE2 on x86-64 and NEON on aarch64,
// avx2, avx512) and follow it; the element-wise arithmetic (add, sub, mul, div) and the rest of the core are the
// build's -march. Every level gives the same numbers within float32's summation-order bound, and the int8
// kernels the same bits (int8.hpp). A CPU runs only its own architecture's levels.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace ct::kernels {

enum class Level { Portable, Avx2, Avx2Vnni, Avx512, Avx512Vnni, Avx512Bf16, Amx, Dotprod, I8mmBf16 };

std::string level_name(Level level);
// "portable", "avx2", ...; also the x86-64 levels ("x86-64" and "x86-64-v2" = portable, "x86-64-v3" = avx2,
// "x86-64-v4" = avx512). Anything else is a ValueError naming the choices.
Level parse_level(const std::string& name);
// Whether this CPU (as cpu_features() reports it) has every feature of `level`.
bool cpu_runs(Level level);
// The CPU's best level, and every level it runs, best first.
Level best_level();
std::vector<std::string> kernel_levels();

// The level in force, and changing it for the whole process: a name as above, or "auto" (the CPU's best). A
// level the CPU cannot run is a ValueError. It also ends any one-product choice (set_int8_kernel,
// set_bf16_kernel).
Level kernel_level();
void set_kernel_level(const std::string& name);

// What the SIMD loops of the level in force were compiled for: xsimd's instruction set ("sse2",
// "fma3+avx2", "avx512bw", ...), floats a vector, and whether a multiply-add rounds once (Adam's moments equal
// torch's fused kernels bit for bit only then).
struct LoopArch {
    std::string simd;
    std::size_t float_lanes;
    bool fused_multiply_add;
};
LoopArch loop_arch();

// One row per product: its key ("sgemm", "small", "gemv", "few_rows", "packed", "bf16", "int8", "loops"),
// what it is, the kernel it runs, and when (the sizes that route it there and split it over threads). Now,
// or at `level` (without set_int8_kernel's or set_bf16_kernel's choice).
struct KernelRow {
    std::string key;
    std::string product;
    std::string kernel;
    std::string when;
};
std::vector<KernelRow> kernel_table();
std::vector<KernelRow> kernel_table(Level level);

}  // namespace ct::kernels
