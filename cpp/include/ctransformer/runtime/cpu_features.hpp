// What the running CPU offers, read at run time (cpuid and the OS's saved-state mask on x86-64, the kernel's
// hardware capabilities, getauxval, on aarch64), so one portable build can report, and later choose, the widest
// kernels the machine allows. A feature counts only when the OS also saves its registers (XCR0): AVX-512 in a
// VM whose kernel disables it is absent. On aarch64 the kernel reports only what it supports, so the same holds.
//
// CTRANSFORMER_KERNEL_LEVEL caps what is reported, for the whole process, as if the CPU were of that level:
// a kernel level (kernels/level.hpp: "portable", "avx2", "avx2_vnni", "avx512", "avx512_vnni",
// "avx512_bf16", "amx", and on aarch64 "dotprod", "i8mm_bf16") or an x86-64 level: "x86-64-v4" (AVX-512 F/BW/DQ/VL, without VNNI, BF16, FP16 or AMX),
// "x86-64-v3" (AVX2 and FMA: an AMD Zen 1), "x86-64-v2" (SSE4.2) or "x86-64" (SSE2). Every run-time choice
// reads these features (the kernel level, the BLAS guard), so one machine runs the kernels a smaller CPU
// would pick; set_kernel_level then lowers the kernels further, not the features. It never adds a feature
// the CPU lacks. An unknown value is an error. A level of the other architecture caps at its baseline: an ARM
// level leaves an x86 CPU SSE2, an x86 level leaves an ARM CPU plain NEON.
#pragma once
#include <string>

namespace ct {

struct CpuFeatures {
    std::string vendor;        // "GenuineIntel", "AuthenticAMD", ... ("" off x86)
    std::string simd_level;    // the best of "avx512" (F+BW+DQ+VL), "avx2" (with FMA), "avx", "sse4.2", "sse2", "neon", "none"
    bool avx2 = false;
    bool fma = false;
    bool avx512f = false;
    bool avx512_vnni = false;  // vpdpbusd: int8 dot products into int32, 512-bit
    bool avx_vnni = false;     // the same on 256-bit registers (VEX)
    bool avx512_bf16 = false;  // vdpbf16ps: bf16 pairs into fp32
    bool avx512_fp16 = false;
    bool amx_tile = false;     // AMX tiles, and the OS saves their state (XCR0 bits 17-18)
    bool amx_bf16 = false;
    bool amx_int8 = false;
    // aarch64 (every one has NEON, the simd_level "neon"):
    bool dotprod = false;      // SDOT/UDOT: int8 dot products of 4 into int32 (ARMv8.2 optional, v8.4 mandatory)
    bool i8mm = false;         // SMMLA: a 2x8 by 8x2 int8 matrix product into int32 (ARMv8.6)
    bool bf16 = false;         // BFDOT/BFMMLA: bf16 pairs into fp32 (ARMv8.6)
    bool sve = false;          // the scalable vectors (reported; no kernel uses them)
    std::string level_cap;     // CTRANSFORMER_KERNEL_LEVEL as applied ("" when unset)
};

// Detected once, then cached.
const CpuFeatures& cpu_features();

}  // namespace ct
