// linear_int8 (int8.hpp): which kernel runs, weights quantised and packed, activations quantised, and the
// product split over threads by columns.
#include <algorithm>
#include <atomic>

#include "../parallel.hpp"
#include "ctransformer/cpu_features.hpp"
#include "ctransformer/error.hpp"
#include "kernels.hpp"

namespace ct {

namespace {

namespace k8 = int8_kernels;

struct Entry {
    const char* name;
    k8::Kernel run;
    k8::QuantizeRow quantize_row;
};

// Best first; each usable only when the CPU has its instructions.
std::vector<Entry> available() {
    std::vector<Entry> out;
#if defined(__x86_64__)
    const CpuFeatures& f = cpu_features();
    if (f.simd_level == "avx512" && f.avx512_vnni) out.push_back({"avx512_vnni", k8::avx512_vnni, k8::quantize_row_avx512});
    if (f.avx2 && f.fma && f.avx_vnni) out.push_back({"avx_vnni", k8::avx_vnni, k8::quantize_row_avx2});
    if (f.avx2 && f.fma) out.push_back({"avx2", k8::avx2, k8::quantize_row_avx2});
#endif
    out.push_back({"portable", k8::portable, k8::quantize_row_portable});
    return out;
}

const std::vector<Entry>& entries() {
    static const std::vector<Entry> e = available();
    return e;
}

std::atomic<int>& selected() {  // index into entries()
    static std::atomic<int> i{0};
    return i;
}

const Entry& current() { return entries()[std::size_t(selected().load())]; }

// Below ~1M multiply-adds (a few microseconds in VNNI) a product stays on one thread: the hand-off costs
// about as much. (A product of 32 x 256 x 256 alone is faster on one thread, but decoding at batch 32 was
// ~10% slower end to end with the bound at 4M: the second thread then sleeps between the larger products.)
// Threads take whole 64-column panels.
constexpr std::size_t kSplitMacs = std::size_t(1) << 20;
constexpr std::size_t kPanel = 64;

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

// q (m, lda) and row scales for x, quantised by the selected kernel's row rule, rows split over threads.
void quantize_activations(std::size_t m, const float* x, std::size_t ldx, std::size_t cols, std::size_t lda,
                          std::int8_t* q, float* scale) {
    const k8::QuantizeRow quantize_row = current().quantize_row;
    parallel::parallel_for(m, std::max<std::size_t>(1, 16384 / std::max<std::size_t>(cols, 1)),
                           [&](std::size_t r0, std::size_t r1) {
        for (std::size_t r = r0; r < r1; ++r) quantize_row(x + r * ldx, cols, q + r * lda, scale + r);
    });
}

void run_split(const k8::Problem& p) {
    const std::size_t out = p.w->out_features, panels = (out + kPanel - 1) / kPanel;
    const std::size_t macs_per_panel = std::max<std::size_t>(1, p.m * p.w->in_features * kPanel);
    const k8::Kernel run = current().run;
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
    std::vector<std::int8_t> q(m * lda, 0);
    std::vector<float> row_scale(m);
    quantize_activations(m, x, ldx, w.in_features, lda, q.data(), row_scale.data());
    if (alpha != 1.0f)
        for (float& s : row_scale) s *= alpha;
    run_split({m, q.data(), lda, row_scale.data(), &w, bias, y, ldy, nullptr});
}

std::vector<std::int32_t> matmul_int8_s32(std::size_t m, const std::int8_t* qx, const Int8Weight& w) {
    const std::size_t lda = w.k_groups() * 4;
    std::vector<std::int8_t> q(m * lda, 0);
    for (std::size_t i = 0; i < m; ++i) std::copy_n(qx + i * w.in_features, w.in_features, q.data() + i * lda);
    std::vector<std::int32_t> acc(m * w.out_features);
    if (m && w.out_features) run_split({m, q.data(), lda, nullptr, &w, nullptr, nullptr, 0, acc.data()});
    return acc;
}

std::string int8_kernel() { return current().name; }

std::vector<std::string> int8_kernels_available() {
    std::vector<std::string> names;
    for (const Entry& e : entries()) names.emplace_back(e.name);
    return names;
}

void set_int8_kernel(const std::string& name) {
    if (name == "auto") {
        selected() = 0;
        return;
    }
    for (std::size_t i = 0; i < entries().size(); ++i)
        if (name == entries()[i].name) {
            selected() = int(i);
            return;
        }
    std::string have;
    for (const Entry& e : entries()) have += std::string(have.empty() ? "" : ", ") + e.name;
    throw ValueError("set_int8_kernel: '" + name + "' is not an int8 kernel this CPU can run; it has " + have +
                     " (or 'auto')");
}

}  // namespace ct
