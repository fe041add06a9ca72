// The aarch64 int8 kernels' last step (kernel_dotprod.cpp, kernel_i8mm.cpp): one row's exact int32 sums for up to
// 16 columns into y, by the portable kernel's float32 rule operation by operation (s = row_scale * scale[n], then
// float(acc) * s, then + bias[n]; the int8 sources are compiled with -ffp-contract=off, so nothing is fused), or
// into acc_out as they are. Plain NEON: every aarch64 CPU has it.
#pragma once
#if defined(__aarch64__)
#include <arm_neon.h>

#include <algorithm>

#include "kernels.hpp"

namespace ct::int8_kernels {

// acc[v] holds columns n + 4v .. n + 4v + 3 of row `row`; cnt <= 4 * NV of them are kept. ws and bias: the
// tile's 4 NV scales and biases, zero beyond the weight.
template <int NV>
inline void store_row(const Problem& p, std::size_t row, std::size_t n, std::size_t cnt, const int32x4_t (&acc)[NV],
                      const float* ws, const float* bias) {
    alignas(16) std::int32_t s32[4 * NV];
    alignas(16) float y[4 * NV];
    if (p.acc_out) {
        for (int v = 0; v < NV; ++v) vst1q_s32(s32 + 4 * v, acc[v]);
        std::copy_n(s32, cnt, p.acc_out + row * p.w->out_features + n);
        return;
    }
    const float32x4_t rs = vdupq_n_f32(p.row_scale[row]);
    for (int v = 0; v < NV; ++v) {
        float32x4_t out = vmulq_f32(vcvtq_f32_s32(acc[v]), vmulq_f32(rs, vld1q_f32(ws + 4 * v)));
        if (p.bias) out = vaddq_f32(out, vld1q_f32(bias + 4 * v));
        vst1q_f32(y + 4 * v, out);
    }
    std::copy_n(y, cnt, p.y + row * p.ldy + n);
}

// A tile's scales and biases for columns [n, n + cnt), zero-padded to 4 NV.
template <int NV>
struct TileScales {
    alignas(16) float ws[4 * NV] = {};
    alignas(16) float bias[4 * NV] = {};
    TileScales(const Problem& p, std::size_t n, std::size_t cnt) {
        std::copy_n(p.w->scale.data() + n, cnt, ws);
        if (p.bias) std::copy_n(p.bias + n, cnt, bias);
    }
};

}  // namespace ct::int8_kernels

#endif
