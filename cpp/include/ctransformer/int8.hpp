// int8: weights quantised per output row, activations quantised per row on the fly, products in int32.
//
// The scheme is symmetric (no zero points), as CTranslate2's int8 and torch's dynamic quantisation of
// Linear layers with per-channel weights:
//   - a row r of a matrix X (a weight's output row, or one row of activations) has amax = max |X[r, :]|;
//     its values become q = clamp(nearbyint(x * (127 / amax)), -127, 127) (ties to even) and its
//     scale is s = amax / 127, so x ~ q s. A row of zeros has q = 0 and s = 0. Both divisions are
//     float32 and correctly rounded, so a NumPy model of them is exact.
//   - y[m, n] = float(acc[m, n]) * (s_x[m] alpha * s_w[n]) + b[n], with acc the exact int32 sum of
//     q_x[m, k] q_w[n, k] and float32 operations in that order (no contraction into FMAs: the kernels'
//     sources are compiled with -ffp-contract=off), so y, too, is reproducible in NumPy bit for bit.
//     Non-finite values in a row of x make that row's output NaN or inf.
//
// Every kernel computes the same exact acc, so they differ only in speed:
//   - "amx_int8": Intel's AMX tiles (the "amx" kernel level): tdpbssd (s8 x s8 in fours into int32), 16 x 16 sums
//     an instruction from the packed weight as it is; up to 8 rows go to "avx512_vnni".
//   - "avx512_vnni": vpdpbusd (u8 x s8 in fours into int32) on 16 lanes. The activations are offset by
//     128 to make them unsigned; the 128 sum_k q_w[n, k] this adds is subtracted afterwards.
//   - "avx_vnni": the same instruction on 8 lanes (VEX encoding; Intel Alder Lake and later, AMD Zen 5).
//   - "avx2": vpmaddubsw + vpmaddwd on 8 lanes. vpmaddubsw saturates pairs at int16, which 255 x 127 x 2
//     would exceed, so it multiplies |q_w| by q_x with q_w's sign moved over (vpsignb): |pair| <= 2 x 127 x 127.
//     A product whose q_x holds no negative value (after a ReLU) multiplies q_x itself by q_w, with no vpsignb.
//   - "portable": plain C++.
// The fastest the CPU has is chosen at run time, so one portable build still uses VNNI;
// set_int8_kernel names one (tests run each the CPU has).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ct {

// A weight W (out, in) in int8, packed for the kernels: columns of the product (output rows of W) in
// blocks of 16, and within a block k in groups of 4, so one 64-byte load holds 4 consecutive k of 16
// outputs: packed[((n / 16) * k_groups + k / 4) * 64 + (n % 16) * 4 + k % 4] = q[n, k] (zero beyond
// out and in).
struct Int8Weight {
    std::size_t out_features = 0, in_features = 0;
    std::vector<std::int8_t> packed;
    std::vector<float> scale;            // (out,): s_w
    std::vector<std::int32_t> row_sum;   // (out,): sum_k q[n, k], for the unsigned offset of the VNNI kernels

    std::size_t k_groups() const { return (in_features + 3) / 4; }
    std::int8_t at(std::size_t n, std::size_t k) const {  // q[n, k]
        return packed[((n / 16) * k_groups() + k / 4) * 64 + (n % 16) * 4 + k % 4];
    }
    // q (out, in) row-major, unpacked.
    std::vector<std::int8_t> unpacked() const;
    // q * scale[:, None] (out, in) row-major, float32: what the int8 weight stands for.
    std::vector<float> dequantized() const;
};

// Quantise a row-major fp32 weight (out, in): per-row scales as above.
Int8Weight quantize_weight_int8(const float* w, std::size_t out, std::size_t in);
// The same from an already quantised q (out, in) and its scales (a quantised checkpoint); the scales are
// kept as given.
Int8Weight pack_weight_int8(const std::int8_t* q, const float* scale, std::size_t out, std::size_t in);

// Quantise rows of x (rows, cols), leading dimension ld: q (rows, cols) and scale (rows,).
void quantize_rows_int8(const float* x, std::size_t rows, std::size_t cols, std::size_t ld, std::int8_t* q,
                        float* scale);

// y (m, out) = x (m, in) W^T as above, alpha folded into the row scales; bias may be null. x's rows have
// leading dimension ldx, y's ldy. Split over the library's threads when large enough.
void linear_int8(std::size_t m, const float* x, std::size_t ldx, const Int8Weight& w, float alpha, const float* bias,
                 float* y, std::size_t ldy);

// The exact int32 products acc (m, out) = q_x (m, in) q_w^T, through the selected kernel (tests).
std::vector<std::int32_t> matmul_int8_s32(std::size_t m, const std::int8_t* qx, const Int8Weight& w);

// The kernel in use: "amx_int8", "avx512_vnni", "avx_vnni", "avx2" or "portable"; set_int8_kernel takes one of those
// (refused with a ValueError when the CPU lacks it) or "auto" (the best the CPU has).
std::string int8_kernel();
void set_int8_kernel(const std::string& name);
// The kernels this CPU can run, best first.
std::vector<std::string> int8_kernels_available();

}  // namespace ct
