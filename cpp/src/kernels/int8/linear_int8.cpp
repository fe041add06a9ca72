// linear_int8 (int8.hpp): which kernel runs, weights quantised and packed, activations quantised, and the
// product split over threads by columns.
#include <algorithm>
#include <cstring>

#include "../dispatch.hpp"
#include "../split.hpp"
#include "../../runtime/parallel.hpp"
#include "ctransformer/error.hpp"
#include "ctransformer/runtime/allocator.hpp"
#include "kernels.hpp"

namespace ct {

namespace {

namespace k8 = int8_kernels;

using kernels::Int8Kernel;

struct Entry {
    k8::Kernel run;
    k8::QuantizeRow quantize_row;
    // The kernel takes the nonnegative shortcut (Problem::nonnegative), and cannot take a q of -128 (avx2:
    // a weight's sign moved onto -128 does not fit a byte). linear_int8's own rows lie in [-127, 127]; only
    // matmul_int8_s32's caller can give -128.
    bool avx2_operands = false;
};

// The kernel level's choice, or set_int8_kernel's (kernels/dispatch.hpp).
Entry current() {
    switch (kernels::int8_kernel()) {
#if defined(__x86_64__)
        case Int8Kernel::AmxInt8: return {k8::amx_int8, k8::quantize_row_avx512};
        case Int8Kernel::Avx512Vnni: return {k8::avx512_vnni, k8::quantize_row_avx512};
        case Int8Kernel::AvxVnni: return {k8::avx_vnni, k8::quantize_row_avx2};
        case Int8Kernel::Avx2: return {k8::avx2, k8::quantize_row_avx2, true};
#endif
#if defined(__aarch64__)
        case Int8Kernel::I8mm: return {k8::i8mm, k8::quantize_row_portable};
        case Int8Kernel::Dotprod: return {k8::dotprod, k8::quantize_row_portable};
        case Int8Kernel::Neon: return {k8::neon, k8::quantize_row_portable};
#endif
        default: return {k8::portable, k8::quantize_row_portable};
    }
}

// Threads and panels: kernels/split.hpp.
constexpr std::size_t kSplitMacs = kernels::kSplitInt8Macs;
constexpr std::size_t kPanel = kernels::kInt8Panel;

void pack_into(Int8Weight& w, const std::int8_t* q) {
    const std::size_t kg = w.k_groups(), blocks = (w.out_features + 15) / 16;
    w.packed.assign(blocks * kg * 64, 0);
    w.row_sum.assign(w.out_features, 0);
    for (std::size_t n = 0; n < w.out_features; ++n)
        for (std::size_t k = 0; k < w.in_features; ++k) {
            const std::int8_t v = q[n * w.in_features + k];
            w.packed[((n / 16) * kg + k / 4) * 64 + (n % 16) * 4 + k % 4] = v;
            w.row_sum[n] += v;
        }
}

// q (m, lda) and row scales for x, quantised by the selected kernel's row rule (the columns past cols zero),
// rows split over threads.
void quantize_activations(std::size_t m, const float* x, std::size_t ldx, std::size_t cols, std::size_t lda,
                          std::int8_t* q, float* scale) {
    const k8::QuantizeRow quantize_row = current().quantize_row;
    parallel::parallel_for(m, std::max<std::size_t>(1, 16384 / std::max<std::size_t>(cols, 1)),
                           [&](std::size_t r0, std::size_t r1) {
        for (std::size_t r = r0; r < r1; ++r) {
            quantize_row(x + r * ldx, cols, q + r * lda, scale + r);
            if (lda > cols) std::memset(q + r * lda + cols, 0, lda - cols);
        }
    });
}

void run_split(k8::Problem p) {
    const std::size_t out = p.w->out_features, panels = (out + kPanel - 1) / kPanel;
    const std::size_t macs_per_panel = std::max<std::size_t>(1, p.m * p.w->in_features * kPanel);
    const Entry kernel = current();
    const k8::Kernel run = kernel.run;
    if (kernel.avx2_operands) {
        // After a ReLU no q is negative (the feed-forward's second product, about a quarter of a
        // Transformer's multiply-adds): the kernel then needs no vpsignb, a Linear 1.2-1.35x faster at 32
        // rows. A negative byte sets the OR's top bit.
        std::uint8_t bits = 0;
        for (std::size_t i = 0; i < p.m * p.lda; ++i) bits |= std::uint8_t(p.qx[i]);
        p.nonnegative = (bits & 0x80) == 0;
    }
    const std::size_t grain = std::max<std::size_t>(1, (kSplitMacs / 2) / macs_per_panel);
    if (p.m * p.w->in_features * out < kSplitMacs) {
        run(p, 0, out);
        return;
    }
    parallel::parallel_for(panels, grain, [&](std::size_t a, std::size_t b) {
        run(p, a * kPanel, std::min(out, b * kPanel));
    }, 1);  // one piece per thread: every panel costs the same
}

}  // namespace

std::vector<std::int8_t> Int8Weight::unpacked() const {
    std::vector<std::int8_t> q(out_features * in_features);
    for (std::size_t n = 0; n < out_features; ++n)
        for (std::size_t k = 0; k < in_features; ++k) q[n * in_features + k] = at(n, k);
    return q;
}

std::vector<float> Int8Weight::dequantized() const {
    std::vector<float> w(out_features * in_features);
    for (std::size_t n = 0; n < out_features; ++n)
        for (std::size_t k = 0; k < in_features; ++k) w[n * in_features + k] = float(at(n, k)) * scale[n];
    return w;
}

Int8Weight quantize_weight_int8(const float* w, std::size_t out, std::size_t in) {
    Int8Weight r;
    r.out_features = out;
    r.in_features = in;
    r.scale.resize(out);
    std::vector<std::int8_t> q(out * in);
    // the portable rule: a weight quantised on one CPU packs the same bytes as on any other
    for (std::size_t n = 0; n < out; ++n) k8::quantize_row_portable(w + n * in, in, q.data() + n * in, &r.scale[n]);
    pack_into(r, q.data());
    return r;
}

Int8Weight pack_weight_int8(const std::int8_t* q, const float* scale, std::size_t out, std::size_t in) {
    Int8Weight r;
    r.out_features = out;
    r.in_features = in;
    r.scale.assign(scale, scale + out);
    for (std::size_t i = 0; i < out * in; ++i)
        if (q[i] == -128) throw ValueError("pack_weight_int8: q holds -128; int8 weights must lie in [-127, 127]");
    pack_into(r, q);
    return r;
}

void quantize_rows_int8(const float* x, std::size_t rows, std::size_t cols, std::size_t ld, std::int8_t* q,
                        float* scale) {
    quantize_activations(rows, x, ld, cols, cols, q, scale);
}

void linear_int8(std::size_t m, const float* x, std::size_t ldx, const Int8Weight& w, float alpha, const float* bias,
                 float* y, std::size_t ldy) {
    if (m == 0 || w.out_features == 0) return;
    const std::size_t lda = w.k_groups() * 4;
    // The quantised rows and their scales from the tensor allocator's cache, uninitialised (allocator.hpp): zero-filled
    // std::vectors cost a memset of 2.7% of the serving engine's thread in a small-model int8 step (32 rows), the
    // other thread waiting.
    const CachedArray<std::int8_t> q = cached_array<std::int8_t>(m * lda);
    const CachedArray<float> row_scale = cached_array<float>(m);
    quantize_activations(m, x, ldx, w.in_features, lda, q.get(), row_scale.get());
    if (alpha != 1.0f)
        for (std::size_t r = 0; r < m; ++r) row_scale[r] *= alpha;
    run_split({m, q.get(), lda, row_scale.get(), &w, bias, y, ldy, nullptr});
}

std::vector<std::int32_t> matmul_int8_s32(std::size_t m, const std::int8_t* qx, const Int8Weight& w) {
    const std::size_t lda = w.k_groups() * 4;
    std::vector<std::int8_t> q(m * lda, 0);
    for (std::size_t i = 0; i < m; ++i) std::copy_n(qx + i * w.in_features, w.in_features, q.data() + i * lda);
    std::vector<std::int32_t> acc(m * w.out_features);
    if (!m || !w.out_features) return acc;
    std::vector<std::int32_t> rest;
    if (current().avx2_operands && std::find(q.begin(), q.end(), std::int8_t(-128)) != q.end()) {
        // The avx2 kernel takes q in [-127, 127]: q = max(q, -127) + d with d = -1 where q was -128, and the
        // product of each through the same kernel, summed.
        std::vector<std::int8_t> d(m * lda, 0);
        for (std::size_t i = 0; i < q.size(); ++i)
            if (q[i] == -128) q[i] = -127, d[i] = -1;
        rest.resize(acc.size());
        run_split({m, d.data(), lda, nullptr, &w, nullptr, nullptr, 0, rest.data()});
    }
    run_split({m, q.data(), lda, nullptr, &w, nullptr, nullptr, 0, acc.data()});
    for (std::size_t i = 0; i < rest.size(); ++i) acc[i] += rest[i];
    return acc;
}

std::string int8_kernel() { return kernels::kernel_name(kernels::int8_kernel()); }

// Every int8 kernel, best first.
constexpr Int8Kernel kInt8Kernels[] = {Int8Kernel::AmxInt8, Int8Kernel::Avx512Vnni, Int8Kernel::AvxVnni, Int8Kernel::Avx2,
                                       Int8Kernel::I8mm,       Int8Kernel::Dotprod, Int8Kernel::Neon,
                                       Int8Kernel::Portable};

// The kernels of the levels this CPU runs, best first, and the portable one, which runs anywhere (on aarch64 no
// level has it: the portable level there runs NEON).
std::vector<std::string> int8_kernels_available() {
    std::vector<Int8Kernel> have{Int8Kernel::Portable};
    for (const std::string& level : kernels::kernel_levels())
        have.push_back(kernels::int8_kernel_at(kernels::parse_level(level)));
    std::vector<std::string> names;
    for (Int8Kernel k : kInt8Kernels)
        if (std::find(have.begin(), have.end(), k) != have.end()) names.push_back(kernels::kernel_name(k));
    return names;
}

// One product's choice, the same as choosing it at the kernel level (kernels/level.hpp) for int8 alone.
void set_int8_kernel(const std::string& name) {
    if (name == "auto") return kernels::follow_level_for_int8();
    const std::vector<std::string> have = int8_kernels_available();
    for (Int8Kernel k : kInt8Kernels)
        if (name == kernels::kernel_name(k) && std::find(have.begin(), have.end(), name) != have.end())
            return kernels::choose_int8_kernel(k);
    std::string names;
    for (const std::string& h : have) names += (names.empty() ? "" : ", ") + h;
    throw ValueError("set_int8_kernel: '" + name + "' is not an int8 kernel this CPU can run; it has " + names +
                     " (or 'auto')");
}

}  // namespace ct
