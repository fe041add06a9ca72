#include "ctransformer/runtime/cpu_features.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ctransformer/error.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace ct {

namespace {

#if defined(__x86_64__) || defined(__i386__)
struct Regs { unsigned a = 0, b = 0, c = 0, d = 0; };

Regs cpuid(unsigned leaf, unsigned sub) {
    Regs r;
    if (!__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d)) return Regs{};
    return r;
}

// XCR0: which register states the OS saves on a context switch (only readable when OSXSAVE is set).
std::uint64_t xcr0() {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (std::uint64_t(hi) << 32) | lo;
}

bool bit(unsigned reg, int n) { return (reg >> n) & 1u; }

CpuFeatures detect() {
    CpuFeatures f;
    const Regs v = cpuid(0, 0);
    char vendor[13] = {};
    std::memcpy(vendor, &v.b, 4);
    std::memcpy(vendor + 4, &v.d, 4);
    std::memcpy(vendor + 8, &v.c, 4);
    f.vendor = vendor;
    const unsigned max_leaf = v.a;
    const Regs l1 = cpuid(1, 0);
    const Regs l7 = max_leaf >= 7 ? cpuid(7, 0) : Regs{};
    const Regs l7s1 = max_leaf >= 7 ? cpuid(7, 1) : Regs{};
    const std::uint64_t xcr = bit(l1.c, 27) ? xcr0() : 0;  // OSXSAVE
    const bool os_avx = (xcr & 0x6) == 0x6;                 // SSE and AVX state
    const bool os_avx512 = os_avx && (xcr & 0xE0) == 0xE0;  // opmask, ZMM0-15 high halves, ZMM16-31
    const bool os_amx = (xcr & 0x60000) == 0x60000;         // XTILECFG, XTILEDATA
    const bool avx = os_avx && bit(l1.c, 28);
    f.fma = avx && bit(l1.c, 12);
    f.avx2 = avx && bit(l7.b, 5);
    f.avx512f = os_avx512 && bit(l7.b, 16);
    const bool avx512_core = f.avx512f && bit(l7.b, 17) && bit(l7.b, 30) && bit(l7.b, 31);  // DQ, BW, VL
    f.avx512_vnni = f.avx512f && bit(l7.c, 11);
    f.avx512_bf16 = f.avx512f && bit(l7s1.a, 5);
    f.avx512_fp16 = f.avx512f && bit(l7.d, 23);
    f.avx_vnni = avx && bit(l7s1.a, 4);
    f.amx_tile = os_amx && bit(l7.d, 24);
    f.amx_bf16 = f.amx_tile && bit(l7.d, 22);
    f.amx_int8 = f.amx_tile && bit(l7.d, 25);
    f.simd_level = avx512_core ? "avx512" : (f.avx2 && f.fma) ? "avx2" : avx ? "avx"
                   : bit(l1.c, 20) ? "sse4.2" : bit(l1.d, 26) ? "sse2" : "none";
    return f;
}
#elif defined(__aarch64__) && defined(__linux__)
// The bits of AT_HWCAP and AT_HWCAP2 (the kernel's arch/arm64/include/uapi/asm/hwcap.h), spelt out so an older
// C library's headers still build.
constexpr unsigned long kHwcapAsimdDotprod = 1ul << 20, kHwcapSve = 1ul << 22;
constexpr unsigned long kHwcap2I8mm = 1ul << 13, kHwcap2Bf16 = 1ul << 14;

CpuFeatures detect() {
    CpuFeatures f;
    f.simd_level = "neon";  // part of every aarch64 CPU
    const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    f.dotprod = hw & kHwcapAsimdDotprod;
    f.sve = hw & kHwcapSve;
    f.i8mm = hw2 & kHwcap2I8mm;
    f.bf16 = hw2 & kHwcap2Bf16;
    return f;
}
#else
CpuFeatures detect() {
    CpuFeatures f;
#if defined(__aarch64__) || defined(__ARM_NEON)
    f.simd_level = "neon";
#else
    f.simd_level = "none";
#endif
    return f;
}
#endif

// The features as a CPU of `level` would have them, at most (CTRANSFORMER_KERNEL_LEVEL; header).
CpuFeatures capped(CpuFeatures f, const std::string& level) {
    // The x86-64 levels, and the kernel levels (kernels/level.hpp) with the extensions each keeps. rank: the
    // x86-64 level; arm: 0 NEON, 1 dot product, 2 i8mm and bf16. A level of one architecture is the other's
    // baseline.
    struct Cap { const char* name; int rank; bool avx_vnni, avx512_vnni, avx512_bf16, amx; int arm; };
    static const Cap caps[] = {{"x86-64", 0, false, false, false, false, 0},
                               {"x86-64-v2", 1, false, false, false, false, 0},
                               {"x86-64-v3", 2, false, false, false, false, 0},
                               {"x86-64-v4", 3, false, false, false, false, 0},
                               {"portable", 0, false, false, false, false, 0},
                               {"avx2", 2, false, false, false, false, 0},
                               {"avx2_vnni", 2, true, false, false, false, 0},
                               {"avx512", 3, false, false, false, false, 0},
                               {"avx512_vnni", 3, false, true, false, false, 0},
                               {"avx512_bf16", 3, false, true, true, false, 0},
                               {"amx", 3, false, true, true, true, 0},
                               {"dotprod", 0, false, false, false, false, 1},
                               {"i8mm_bf16", 0, false, false, false, false, 2}};
    const Cap* cap = nullptr;
    for (const Cap& c : caps)
        if (level == c.name) cap = &c;
    if (!cap)
        throw ValueError("CTRANSFORMER_KERNEL_LEVEL must be portable, avx2, avx2_vnni, avx512, avx512_vnni, "
                         "avx512_bf16, amx, dotprod, i8mm_bf16, x86-64, x86-64-v2, x86-64-v3 or x86-64-v4, got '" +
                         level + "'");
    const int rank = cap->rank;
    // No x86-64 level includes these extensions: an AVX-512 CPU of level v4 may lack every one.
    f.avx_vnni = f.avx_vnni && cap->avx_vnni;
    f.avx512_vnni = f.avx512_vnni && cap->avx512_vnni;
    f.avx512_bf16 = f.avx512_bf16 && cap->avx512_bf16;
    f.avx512_fp16 = false;
    f.amx_tile = f.amx_tile && cap->amx;
    f.amx_bf16 = f.amx_bf16 && cap->amx;
    f.amx_int8 = f.amx_int8 && cap->amx;
    f.dotprod = f.dotprod && cap->arm >= 1;
    f.i8mm = f.i8mm && cap->arm >= 2;
    f.bf16 = f.bf16 && cap->arm >= 2;
    f.sve = false;
    if (rank < 3) f.avx512f = false;
    if (rank < 2) f.avx2 = f.fma = false;
    // The SIMD level of each x86-64 level, in the same order; "avx" (no AVX2) ranks with SSE4.2.
    static const char* const simd[] = {"sse2", "sse4.2", "avx2", "avx512"};
    const std::string& s = f.simd_level;
    const int have = s == "avx512" ? 3 : s == "avx2" ? 2 : s == "avx" || s == "sse4.2" ? 1 : s == "sse2" ? 0 : -1;
    if (have > rank) f.simd_level = simd[rank];
    f.level_cap = level;
    return f;
}

CpuFeatures detect_capped() {
    CpuFeatures f = detect();
    const char* level = std::getenv("CTRANSFORMER_KERNEL_LEVEL");
    if (level && *level) f = capped(f, level);
    return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
    static const CpuFeatures features = detect_capped();
    return features;
}

}  // namespace ct
