// What the running CPU offers, read at run time (cpuid and the OS's saved-state mask on x86-64), so one
// portable build can report, and later choose, the widest kernels the machine allows. A feature counts
// only when the OS also saves its registers (XCR0): AVX-512 in a VM whose kernel disables it is absent.
//
// CTRANSFORMER_KERNEL_LEVEL caps what is reported, for the whole process, as if the CPU were of that level:
// a kernel level (kernels/level.hpp: "portable", "avx2", "avx2_vnni", "avx512", "avx512_vnni",
// "avx512_bf16") or an x86-64 level: "x86-64-v4" (AVX-512 F/BW/DQ/VL, without VNNI, BF16, FP16 or AMX),
// "x86-64-v3" (AVX2 and FMA: an AMD Zen 1), "x86-64-v2" (SSE4.2) or "x86-64" (SSE2). Every run-time choice
// reads these features (the kernel level, the BLAS guard), so one machine runs the kernels a smaller CPU
// would pick; set_kernel_level then lowers the kernels further, not the features. It never adds a feature
// the CPU lacks. An unknown value is an error.
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
    std::string level_cap;     // CTRANSFORMER_KERNEL_LEVEL as applied ("" when unset)
};

// Detected once, then cached.
const CpuFeatures& cpu_features();

}  // namespace ct
