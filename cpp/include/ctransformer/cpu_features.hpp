// What the running CPU offers, read at run time (cpuid and the OS's saved-state mask on x86-64), so one
// portable build can report, and later choose, the widest kernels the machine allows. A feature counts
// only when the OS also saves its registers (XCR0): AVX-512 in a VM whose kernel disables it is absent.
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
};

// Detected once, then cached.
const CpuFeatures& cpu_features();

}  // namespace ct
