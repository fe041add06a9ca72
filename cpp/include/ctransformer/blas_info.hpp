// Which BLAS the core runs on, and whether its kernels fit this CPU. OpenBLAS picks its kernels ("core")
// at load time from the CPU it recognises; a CPU newer than the library falls back to its oldest x86-64
// kernels (Prescott, SSE3) and every product runs ~4x slower, silently (DEVELOPING.md, "The BLAS"). blas_core_advice()
// turns that into words; the Python package warns with them at import.
#pragma once
#include <string>

namespace ct {

struct BlasInfo {
    std::string name;        // "OpenBLAS"
    std::string version;     // "0.3.34"
    std::string config;      // openblas_get_config(): version, build options, the core picked
    std::string core;        // openblas_get_corename(): the kernels running now ("SkylakeX", "Haswell", ...)
    std::string core_level;  // their instruction set: "avx512", "avx2", "avx", "sse" ("" = a core not in our table)
    std::string library;     // the shared library's path ("" if linked statically)
    std::string source;      // "scipy-openblas32" (the PyPI wheel) or "system"
    std::string symbol_prefix;  // "scipy_" for the wheel
    int threads;             // ct's thread count (products are split by ct; OpenBLAS itself runs one thread)
};

BlasInfo blas_info();

// "" when the BLAS core uses what the CPU offers (or cannot be judged); else one paragraph naming the
// core, the CPU's level and the one-line fix (a user's own OPENBLAS_CORETYPE is named, never overridden).
std::string blas_core_advice();

}  // namespace ct
