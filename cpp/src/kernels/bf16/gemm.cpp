// gemm_bf16 (bf16.hpp): which kernel runs and how a product is split over threads (the emulation for CPUs
// without bf16 units: kernels/bf16/emulated.cpp).
#include <algorithm>
#include <vector>

#include "../../blas.hpp"
#include "../dispatch.hpp"
#include "../split.hpp"
#include "../../runtime/parallel.hpp"
#include "ctransformer/bf16.hpp"
#include "ctransformer/error.hpp"
#include "ctransformer/runtime/cpu_features.hpp"
#include "gemm_kernels.hpp"

namespace ct {

namespace {

using kernels::Bf16Kernel;

// Where a product goes and when it is split: kernels/split.hpp.
using kernels::kFewRows;
using kernels::kSplitFlops;
constexpr std::size_t kSplitFewRowsElements = kernels::kSplitWeightBytes / sizeof(bf16_t);
constexpr int kPanel = 32;  // columns of the kernel's tile: a thread's columns come in whole panels
constexpr int kRowPanel = 12;
constexpr int kAmxRows = 32;  // rows of the AMX kernel's blocks of C

bf16_kernels::Block make_block(int m, int n, int k, float alpha, const Bf16Operand& a, const Bf16Operand& b, float beta,
                               float* c, int ldc) {
    return {a.f32, a.b16, a.ld, a.trans, b.f32, b.b16, b.ld, b.trans, c, ldc, 0, m, 0, n, k, alpha, beta != 0.0f};
}

void check(int m, int n, int k, float beta, const Bf16Operand& a, const Bf16Operand& b) {
    if (m < 0 || n < 0 || k < 0) throw ValueError("gemm_bf16: negative size");
    if (beta != 0.0f && beta != 1.0f) throw ValueError("gemm_bf16: beta must be 0 or 1");
    if (bool(a.f32) == bool(a.b16) || bool(b.f32) == bool(b.b16))
        throw ValueError("gemm_bf16: each operand needs exactly one of fp32 or bf16 data");
}

// C = alpha P + C with alpha != 1: the kernel scales only a fresh product, so P goes through a scratch.
template <class Run>
void scaled_accumulate(int m, int n, float* c, int ldc, Run&& run) {
    std::vector<float> p(std::size_t(m) * std::size_t(n));
    run(p.data(), n);
    for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) c[std::size_t(i) * ldc + j] += p[std::size_t(i) * n + j];
}

// Decoding's products (x W^T of at most kFewRows rows) on a CPU with AVX512_BF16: no packing. False: not one.
bool few_rows(int m, int n, int k, float alpha, const Bf16Operand& a, const Bf16Operand& b, float beta, float* c, int ldc,
              bool serial) {
    if (m > kFewRows || a.trans || !b.trans || k == 0) return false;
    bf16_kernels::Block g = make_block(m, n, k, alpha, a, b, beta, c, ldc);
    const int threads = serial ? 1 : parallel::threads();
    // Bound by reading B (kSplitWeightBytes).
    if (threads <= 1 || std::size_t(n) * std::size_t(k) < kSplitFewRowsElements) {
        bf16_kernels::avx512_bf16_few_rows(g);
        return true;
    }
    parallel::parallel_chunks(std::size_t(n), std::size_t(threads), [&](std::size_t, std::size_t n0, std::size_t n1) {
        bf16_kernels::Block piece = g;
        piece.n0 = int(n0);
        piece.n1 = int(n1);
        bf16_kernels::avx512_bf16_few_rows(piece);
    });
    return true;
}

// An empty sum (k = 0): C = 0, or C unchanged. False: not one.
bool empty_sum(int m, int n, int k, float beta, float* c, int ldc) {
    if (k != 0) return false;
    if (beta == 0.0f)
        for (int i = 0; i < m; ++i) std::fill_n(c + std::size_t(i) * ldc, n, 0.0f);
    return true;
}

void native(int m, int n, int k, float alpha, const Bf16Operand& a, const Bf16Operand& b, float beta, float* c, int ldc,
            bool serial) {
    if (few_rows(m, n, k, alpha, a, b, beta, c, ldc, serial)) return;
    if (beta != 0.0f && alpha != 1.0f)
        return scaled_accumulate(m, n, c, ldc, [&](float* p, int ldp) { native(m, n, k, alpha, a, b, 0.0f, p, ldp, serial); });
    if (empty_sum(m, n, k, beta, c, ldc)) return;
    bf16_kernels::Block g = make_block(m, n, k, alpha, a, b, beta, c, ldc);
    const int threads = serial ? 1 : parallel::threads();
    const int col_panels = (n + kPanel - 1) / kPanel, row_panels = (m + kRowPanel - 1) / kRowPanel;
    if (threads <= 1 || 2.0 * m * n * k < kSplitFlops || (col_panels < 2 && row_panels < 2))
        return bf16_kernels::avx512_bf16_block(g);
    // One piece per thread, each a range of C's columns: A is packed once, its row panels shared out
    // between the threads, then each thread packs its own columns of B and multiplies. (Each thread
    // packing all of A for itself would cost 11% of the base model's training step.) With fewer column
    // panels than threads, the rows are split instead and each thread packs all of B.
    const std::size_t pieces = std::size_t(threads);
    if (col_panels >= threads) {
        thread_local std::vector<std::uint32_t> shared;  // the calling thread's; workers read it
        shared.resize(bf16_kernels::avx512_bf16_shared_a_words(m, k));
        std::uint32_t* packed = shared.data();
        parallel::parallel_chunks(std::size_t(row_panels), std::min<std::size_t>(pieces, row_panels),
                                  [&](std::size_t, std::size_t p0, std::size_t p1) {
            bf16_kernels::avx512_bf16_pack_shared_a(g, int(p0), int(p1), packed);
        });
        parallel::parallel_chunks(std::size_t(col_panels), pieces, [&](std::size_t, std::size_t p0, std::size_t p1) {
            bf16_kernels::Block piece = g;
            piece.n0 = int(p0) * kPanel;
            piece.n1 = std::min(n, int(p1) * kPanel);
            bf16_kernels::avx512_bf16_block(piece, packed);
        });
        return;
    }
    parallel::parallel_chunks(std::size_t(row_panels), std::min<std::size_t>(pieces, row_panels),
                              [&](std::size_t, std::size_t p0, std::size_t p1) {
        bf16_kernels::Block piece = g;
        piece.m0 = int(p0) * kRowPanel;
        piece.m1 = std::min(m, int(p1) * kRowPanel);
        bf16_kernels::avx512_bf16_block(piece);
    });
}

// AMX-BF16: decoding's products as the AVX512_BF16 kernel's (reading the weight bounds them), the rest in tiles,
// C's columns split over threads in panels of 32, each thread packing all of A for itself (A packed once and shared
// out, as the AVX512_BF16 kernel does, made GPT-2's prompts 13-16% slower here: half of it read from the other
// core), or its rows in blocks of 32 when there are too few columns.
void amx(int m, int n, int k, float alpha, const Bf16Operand& a, const Bf16Operand& b, float beta, float* c, int ldc,
         bool serial) {
    if (few_rows(m, n, k, alpha, a, b, beta, c, ldc, serial)) return;
    if (beta != 0.0f && alpha != 1.0f)
        return scaled_accumulate(m, n, c, ldc, [&](float* p, int ldp) { amx(m, n, k, alpha, a, b, 0.0f, p, ldp, serial); });
    if (empty_sum(m, n, k, beta, c, ldc)) return;
    const bf16_kernels::Block g = make_block(m, n, k, alpha, a, b, beta, c, ldc);
    const int threads = serial ? 1 : parallel::threads();
    const int col_panels = (n + kPanel - 1) / kPanel, row_blocks = (m + kAmxRows - 1) / kAmxRows;
    if (threads <= 1 || 2.0 * m * n * k < kSplitFlops || (col_panels < 2 && row_blocks < 2))
        return bf16_kernels::amx_bf16_block(g);
    if (col_panels >= threads) {
        parallel::parallel_chunks(std::size_t(col_panels), std::size_t(threads), [&](std::size_t, std::size_t p0, std::size_t p1) {
            bf16_kernels::Block piece = g;
            piece.n0 = int(p0) * kPanel;
            piece.n1 = std::min(n, int(p1) * kPanel);
            bf16_kernels::amx_bf16_block(piece);
        });
        return;
    }
    parallel::parallel_chunks(std::size_t(row_blocks), std::size_t(threads), [&](std::size_t, std::size_t p0, std::size_t p1) {
        bf16_kernels::Block piece = g;
        piece.m0 = int(p0) * kAmxRows;
        piece.m1 = std::min(m, int(p1) * kAmxRows);
        bf16_kernels::amx_bf16_block(piece);
    });
}

#if defined(__aarch64__)
// ARM's BF16: the columns split over threads in panels, each thread packing its own (kernels/bf16/gemm_neon_bf16.cpp).
void neon(int m, int n, int k, float alpha, const Bf16Operand& a, const Bf16Operand& b, float beta, float* c, int ldc,
          bool serial) {
    if (beta != 0.0f && alpha != 1.0f)
        return scaled_accumulate(m, n, c, ldc, [&](float* p, int ldp) { neon(m, n, k, alpha, a, b, 0.0f, p, ldp, serial); });
    const bf16_kernels::Block g = make_block(m, n, k, alpha, a, b, beta, c, ldc);
    const int threads = serial ? 1 : parallel::threads();
    const int col_panels = (n + kPanel - 1) / kPanel;
    if (threads <= 1 || 2.0 * m * n * k < kSplitFlops || col_panels < 2) return bf16_kernels::neon_bf16_block(g);
    parallel::parallel_chunks(std::size_t(col_panels), std::size_t(threads), [&](std::size_t, std::size_t p0, std::size_t p1) {
        bf16_kernels::Block piece = g;
        piece.n0 = int(p0) * kPanel;
        piece.n1 = std::min(n, int(p1) * kPanel);
        bf16_kernels::neon_bf16_block(piece);
    });
}
#endif

void run(int m, int n, int k, float alpha, Bf16Operand a, Bf16Operand b, float beta, float* c, int ldc, bool serial) {
    check(m, n, k, beta, a, b);
    if (m == 0 || n == 0) return;
    switch (kernels::bf16_kernel()) {
        case Bf16Kernel::Avx512Bf16: return native(m, n, k, alpha, a, b, beta, c, ldc, serial);
        case Bf16Kernel::AmxBf16: return amx(m, n, k, alpha, a, b, beta, c, ldc, serial);
#if defined(__aarch64__)
        case Bf16Kernel::NeonBf16: return neon(m, n, k, alpha, a, b, beta, c, ldc, serial);
#endif
        default: return bf16_kernels::emulated(m, n, k, alpha, a, b, beta, c, ldc, serial);
    }
}

}  // namespace

void round_to_bf16(const float* in, bf16_t* out, std::size_t n) {
    parallel::parallel_for(n, 1 << 16, [&](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i) out[i] = to_bf16(in[i]);
    });
}

void widen_bf16(const bf16_t* in, float* out, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) out[i] = from_bf16(in[i]);
}

void gemm_bf16(int m, int n, int k, float alpha, Bf16Operand a, Bf16Operand b, float beta, float* c, int ldc) {
    run(m, n, k, alpha, a, b, beta, c, ldc, false);
}

void gemm_bf16_serial(int m, int n, int k, float alpha, Bf16Operand a, Bf16Operand b, float beta, float* c, int ldc) {
    run(m, n, k, alpha, a, b, beta, c, ldc, true);
}

void gemm_bf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
               int ldb, float beta, float* c, int ldc) {
    run(m, n, k, alpha, Bf16Operand::fp32(a, lda, trans_a), Bf16Operand::fp32(b, ldb, trans_b), beta, c, ldc, false);
}

void gemm_bf16_serial(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                      const float* b, int ldb, float beta, float* c, int ldc) {
    run(m, n, k, alpha, Bf16Operand::fp32(a, lda, trans_a), Bf16Operand::fp32(b, ldb, trans_b), beta, c, ldc, true);
}

std::string bf16_kernel() { return kernels::kernel_name(kernels::bf16_kernel()); }

// One product's choice, the same as choosing it at the kernel level (kernels/level.hpp) for bf16 alone.
void set_bf16_kernel(const std::string& name) {
    if (name == "auto")
        kernels::follow_level_for_bf16();
    else if (name == "emulated")
        kernels::choose_bf16_kernel(Bf16Kernel::Emulated);
    else if (name == "avx512_bf16") {
        if (!kernels::cpu_runs(kernels::Level::Avx512Bf16))
            throw ValueError("set_bf16_kernel: this CPU has no AVX512_BF16 (cpu_features()['avx512_bf16'] is False); "
                             "use 'auto' or 'emulated'");
        kernels::choose_bf16_kernel(Bf16Kernel::Avx512Bf16);
    } else if (name == "amx_bf16") {
        if (!kernels::cpu_runs(kernels::Level::Amx))
            throw ValueError("set_bf16_kernel: this CPU has no AMX-BF16 usable here (cpu_features()['amx_bf16'] is "
                             "False, or Linux refused the tile state); use 'auto', 'avx512_bf16' or 'emulated'");
        kernels::choose_bf16_kernel(Bf16Kernel::AmxBf16);
    } else if (name == "neon_bf16") {
        if (!cpu_features().bf16)
            throw ValueError("set_bf16_kernel: this CPU has no ARM BF16 (cpu_features()['bf16'] is False); "
                             "use 'auto' or 'emulated'");
        kernels::choose_bf16_kernel(Bf16Kernel::NeonBf16);
    } else {
        throw ValueError("set_bf16_kernel: kernel must be 'auto', 'amx_bf16', 'avx512_bf16', 'neon_bf16' or 'emulated', got '" +
                         name + "'");
    }
}

}  // namespace ct
