// Which of a file's float kernels (compiled with function target attributes) this CPU may take: AVX-512
// (F, BW, DQ, VL), AVX2 with FMA, or none. The environment variable `env` set to "avx2" or "off" asks for
// less, so the tests run every path on one machine (CTRANSFORMER_FEW_ROWS, CTRANSFORMER_PACKED).
#pragma once
#include <cstdlib>
#include <string>

#include "ctransformer/cpu_features.hpp"

namespace ct {

enum class FmaLevel { None, Avx2, Avx512 };

inline FmaLevel fma_level(const char* env) {
    const CpuFeatures& f = cpu_features();
    const char* asked = std::getenv(env);
    const std::string want = asked ? asked : "";
    if (want == "off") return FmaLevel::None;
    if (f.simd_level == "avx512" && want != "avx2") return FmaLevel::Avx512;
    if (f.avx2 && f.fma) return FmaLevel::Avx2;
    return FmaLevel::None;
}

}  // namespace ct
