#include "blas.hpp"
#include "kernels/fp32/few_rows.hpp"
#include "kernels/simd/small_gemm.hpp"
#include "ctransformer/blas_info.hpp"
#include "ctransformer/runtime/cpu_features.hpp"
#include "ctransformer/error.hpp"
#include "ctransformer/runtime/threads.hpp"
#include "runtime/parallel.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include <dlfcn.h>

// The library's symbols may carry a prefix: the scipy-openblas32 wheel's are scipy_cblas_sgemm,
// scipy_openblas_get_corename, ... (CMake sets CT_BLAS_PREFIX to scipy_ for it, to nothing otherwise).
#ifndef CT_BLAS_PREFIX
#define CT_BLAS_PREFIX
#endif
#ifndef CT_BLAS_KIND
#define CT_BLAS_KIND ""
#endif
#define CT_BLAS_CAT_(a, b) a##b
#define CT_BLAS_CAT(a, b) CT_BLAS_CAT_(a, b)
#define BLAS(name) CT_BLAS_CAT(CT_BLAS_PREFIX, name)
#define CT_BLAS_STR_(x) #x
#define CT_BLAS_STR(x) CT_BLAS_STR_(x)

// The few CBLAS and OpenBLAS entry points the core calls, declared here rather than taken from a
// cblas.h: the CBLAS C interface and its enum values are fixed by the standard, and this file then
// compiles wherever the core does (every x86-64 level, aarch64) whichever OpenBLAS is linked, with or
// without its headers installed. Integers are 32-bit (blasint of the LP64 builds: the scipy-openblas32
// wheel, Debian's libopenblas0).
extern "C" {
enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112 };
void BLAS(cblas_sgemm)(CBLAS_ORDER order, CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int m, int n, int k,
                       float alpha, const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc);
void BLAS(cblas_sgemv)(CBLAS_ORDER order, CBLAS_TRANSPOSE trans, int m, int n, float alpha, const float* a, int lda,
                       const float* x, int incx, float beta, float* y, int incy);
void BLAS(openblas_set_num_threads)(int num_threads);
int BLAS(openblas_get_num_threads)(void);
char* BLAS(openblas_get_config)(void);
char* BLAS(openblas_get_corename)(void);
}

namespace ct::blas {

namespace {

// Once: OpenBLAS's own default thread count (OPENBLAS_NUM_THREADS or the cores) is read, for ct's pool to
// start from, and OpenBLAS is then told to use one thread; the splitting happens here instead.
int openblas_default_threads() {
    static const int threads = [] {
        const int t = BLAS(openblas_get_num_threads)();
        BLAS(openblas_set_num_threads)(1);
        return t;
    }();
    return threads;
}

// Handed to the pool as this library is loaded, before any code of the core can run.
[[maybe_unused]] const bool g_source_registered =
    (parallel::set_default_threads_source(&openblas_default_threads), true);

}  // namespace

void init() { openblas_default_threads(); }

namespace {

// Where a product goes and when it is split: kernels/split.hpp.
using kernels::kDirectMacs;
using kernels::kGemmPiecesPerThread;
using kernels::kMinBlock;
using kernels::kSplitFlops;
constexpr std::size_t kSplitGemvElements = kernels::kSplitWeightBytes / sizeof(float);

}  // namespace

void gemm_serial(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc) {
    if (m == 0 || n == 0) return;
    if (beta == 0.0f) {
        // OpenBLAS 0.3.21's beta = 0 pass (sgemm_beta) is slow: a 400x32x32 product takes 30 us with
        // it and 13 us as memset + beta = 1 (50x50x8: 1.7 vs 1.1 us; equal for large products).
        if (ldc == n)
            std::memset(c, 0, sizeof(float) * std::size_t(m) * std::size_t(n));
        else  // rows of a wider matrix (an attention head's columns): short rows, no call per row
            for (int i = 0; i < m; ++i) std::fill_n(c + std::size_t(i) * std::size_t(ldc), n, 0.0f);
        beta = 1.0f;
    }
    if (std::size_t(m) * std::size_t(n) * std::size_t(k) <= kDirectMacs) {
        if (beta != 1.0f)
            for (int i = 0; i < m; ++i)
                for (int j = 0; j < n; ++j) c[std::size_t(i) * std::size_t(ldc) + j] *= beta;
        // straight loops of the kernel level (kernels/simd/small_gemm.cpp)
        return kernels::small_gemm_loops().gemm_direct(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, c, ldc);
    }
    if (m <= kFewRows && !trans_a && trans_b && k > 0 && few_rows_available()) {  // x W^T, W read once
        few_rows_gemm({m, k, alpha, a, lda, b, ldb, beta, c, ldc}, 0, n);
        return;
    }
    if (m <= kGemvRows && k > 0) {
        // One row of C per sgemv: C[i] = alpha * op(B)^T-row-product + C[i]. Row i of op(A) is a row
        // of A, or (trans_a) a column of A with stride lda.
        for (int i = 0; i < m; ++i) {
            const float* x = trans_a ? a + i : a + std::size_t(i) * std::size_t(lda);
            if (trans_b)  // B is (n, k): C[i] = B x
                BLAS(cblas_sgemv)(CblasRowMajor, CblasNoTrans, n, k, alpha, b, ldb, x, trans_a ? lda : 1, beta,
                            c + std::size_t(i) * std::size_t(ldc), 1);
            else          // B is (k, n): C[i] = B^T x
                BLAS(cblas_sgemv)(CblasRowMajor, CblasTrans, k, n, alpha, b, ldb, x, trans_a ? lda : 1, beta,
                            c + std::size_t(i) * std::size_t(ldc), 1);
        }
        return;
    }
    BLAS(cblas_sgemm)(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n,
                k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
    init();
    if (m == 0 || n == 0) return;
    const std::size_t threads = std::size_t(parallel::threads());
    // sgemv rows are bound by reading B, not by arithmetic (kSplitWeightBytes).
    const bool few_rows = m <= kFewRows && !trans_a && trans_b && few_rows_available();  // kernels/fp32/few_rows.cpp or sgemv
    const bool gemv_worth_splitting =
        (m <= kGemvRows || few_rows) && std::size_t(n) * std::size_t(k) >= kSplitGemvElements;
    if (threads <= 1 || (2.0 * m * n * k < kSplitFlops && !gemv_worth_splitting) ||
        (m < 2 * kMinBlock && n < 2 * kMinBlock))
        return gemm_serial(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    // Along the longer side of C: each piece packs all of the other operand, so split rows when op(A) is the
    // taller and columns when op(B) is the wider. A prompt's 128 rows against GPT-2's 2304 x 768 projection,
    // split by rows, had both threads pack the whole weight (26% of the prefill in packing); by columns,
    // prefill of 128 tokens took 154-179 ms against 185-215 (best of 10, 4 runs alternated, Zen 3). Training's
    // products are mostly the taller (batch x length rows): its steps did not move (torch/ct 1.82x -> 1.77x
    // small, 1.41x -> 1.44x base, within a run's noise).
    if (m >= 2 * kMinBlock && (m >= n || n < 2 * kMinBlock)) {  // rows of C: rows of op(A)
        parallel::parallel_for(std::size_t(m), kMinBlock, [&](std::size_t i0, std::size_t i1) {
            const float* ai = trans_a ? a + i0 : a + i0 * std::size_t(lda);
            gemm_serial(trans_a, trans_b, int(i1 - i0), n, k, alpha, ai, lda, b, ldb, beta, c + i0 * std::size_t(ldc), ldc);
        }, kGemmPiecesPerThread);
    } else {  // columns of C: columns of op(B)
        parallel::parallel_for(std::size_t(n), kMinBlock, [&](std::size_t j0, std::size_t j1) {
            const float* bj = trans_b ? b + j0 * std::size_t(ldb) : b + j0;
            gemm_serial(trans_a, trans_b, m, int(j1 - j0), k, alpha, a, lda, bj, ldb, beta, c + j0, ldc);
        }, kGemmPiecesPerThread);
    }
}

}  // namespace ct::blas

namespace ct {

namespace {

// OpenBLAS's x86-64 cores (kernel/x86_64 and driver/others/dynamic.c) by the widest instructions their
// sgemm kernels use, and its aarch64 cores (driver/others/dynamic_arm64.c): "sve" for those with SVE
// kernels, "neon" for the rest (informational: no advice is given on aarch64). A name not listed is judged by
// nobody: no warning rather than a wrong one.
std::string core_level(const std::string& core) {
    static const char* const sve[] = {"neoversev1", "neoversen2", "neoversev2", "a64fx", "armv8sve"};
    static const char* const neon[] = {"armv8", "cortexa53", "cortexa55", "cortexa57", "cortexa72", "cortexa73",
                                       "cortexa76", "neoversen1", "thunderx", "thunderx2t99", "thunderx3t110",
                                       "tsv110", "emag8180", "falkor", "vortex", "ampereone"};
    for (const char* c : sve) if (core == c) return "sve";
    for (const char* c : neon) if (core == c) return "neon";
    static const char* const avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    static const char* const avx2[] = {"Haswell", "Zen"};
    static const char* const avx[] = {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller", "Excavator"};
    static const char* const sse[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Opteron",
                                      "Opteron_SSE3", "Barcelona", "Bobcat", "Nano", "Katmai", "Coppermine",
                                      "Northwood", "Banias", "Athlon", "generic", "Generic"};
    for (const char* c : avx512) if (core == c) return "avx512";
    for (const char* c : avx2) if (core == c) return "avx2";
    for (const char* c : avx) if (core == c) return "avx";
    for (const char* c : sse) if (core == c) return "sse";
    return "";
}

int level_rank(const std::string& level) {
    if (level == "neon" || level == "sve") return -1;  // aarch64's: never compared with x86's
    if (level == "avx512") return 3;
    if (level == "avx2") return 2;
    if (level == "avx") return 1;
    return 0;  // sse, sse4.2, sse2, none
}

}  // namespace

BlasInfo blas_info() {
    BlasInfo info;
    info.name = "OpenBLAS";
    info.config = BLAS(openblas_get_config)();
    info.core = BLAS(openblas_get_corename)();
    info.core_level = core_level(info.core);
    // "OpenBLAS 0.3.34 DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64": the version is the second word.
    const auto space = info.config.find(' ');
    if (space != std::string::npos)
        info.version = info.config.substr(space + 1, info.config.find(' ', space + 1) - space - 1);
    Dl_info where{};
    if (dladdr(reinterpret_cast<void*>(&BLAS(cblas_sgemm)), &where) && where.dli_fname) info.library = where.dli_fname;
    info.source = CT_BLAS_KIND;
    info.symbol_prefix = CT_BLAS_STR(CT_BLAS_PREFIX);
    info.threads = get_num_threads();
    return info;
}

std::string blas_core_advice() {
    const CpuFeatures& cpu = cpu_features();
    const BlasInfo blas = blas_info();
    if (blas.core_level.empty() || level_rank(cpu.simd_level) < 2 || level_rank(blas.core_level) >= level_rank(cpu.simd_level))
        return "";
    const std::string want = cpu.simd_level == "avx512" ? "SkylakeX" : cpu.vendor == "AuthenticAMD" ? "Zen" : "Haswell";
    const char* env = std::getenv("OPENBLAS_CORETYPE");
    std::string text = "OpenBLAS " + blas.version + " runs its " + blas.core + " kernels (" + blas.core_level +
                       ") on a CPU with " + cpu.simd_level + ": matrix products run slower than this CPU allows "
                       "(measured: 2x with AVX2 kernels on AVX-512, 4x with SSE kernels). ";
    if (env && *env)
        text += "OPENBLAS_CORETYPE=" + std::string(env) + " is set in the environment, and OpenBLAS obeys it. Fix: "
                "unset OPENBLAS_CORETYPE, or set OPENBLAS_CORETYPE=" + want + ", before Python starts.";
    else
        text += "This OpenBLAS does not recognise the CPU. Fix: export OPENBLAS_CORETYPE=" + want +
                " before Python starts (or use a newer OpenBLAS: pip install -U scipy-openblas32).";
    return text;
}

}  // namespace ct
