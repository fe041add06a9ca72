// The int8 kernel for any CPU: plain C++ over the packed layout (int8.hpp), one output at a time.
#include <algorithm>
#include <cmath>

#include "kernels.hpp"

namespace ct::int8_kernels {

void quantize_row_portable(const float* x, std::size_t cols, std::int8_t* q, float* scale) {
    std::uint32_t amax_bits = 0;
    for (std::size_t i = 0; i < cols; ++i) {
        std::uint32_t u;
        __builtin_memcpy(&u, x + i, 4);
        amax_bits = std::max(amax_bits, u & 0x7FFFFFFFu);
    }
    const RowRange r = row_range(amax_bits);
    *scale = r.scale;
    for (std::size_t i = 0; i < cols; ++i) q[i] = r.nonzero_finite ? std::int8_t(std::nearbyint(x[i] * r.inv)) : 0;
}

void portable(const Problem& p, std::size_t n0, std::size_t n1) {
    const Int8Weight& w = *p.w;
    const std::size_t kg = w.k_groups();
    for (std::size_t i = 0; i < p.m; ++i) {
        const std::int8_t* a = p.qx + i * p.lda;
        for (std::size_t n = n0; n < n1; ++n) {
            const std::int8_t* b = w.packed.data() + (n / 16) * kg * 64 + (n % 16) * 4;
            std::int32_t acc = 0;
            for (std::size_t g = 0; g < kg; ++g)
                for (int j = 0; j < 4; ++j) acc += std::int32_t(a[4 * g + j]) * std::int32_t(b[64 * g + j]);
            if (p.acc_out) {
                p.acc_out[i * w.out_features + n] = acc;
                continue;
            }
            const float s = p.row_scale[i] * w.scale[n];
            float y = float(acc) * s;
            if (p.bias) y = y + p.bias[n];
            p.y[i * p.ldy + n] = y;
        }
    }
}

}  // namespace ct::int8_kernels
