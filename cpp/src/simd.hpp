// Vector helpers for the hand-written kernels, on xsimd (used directly here only; xtensor's own
// XTENSOR_USE_XSIMD stays off, so Array's type is the same in every translation unit).
//
// xsimd's exp, log and tanh are vectorised Cephes-style polynomials, within 1-2 ulp of libm's and
// 12x (exp) to 23x (tanh) faster on this machine. Loops walk `W` floats at a time and finish with
// one partial batch (padded; AVX2's masked loads and stores touch only the tail's own elements),
// so the tail gets exactly the same arithmetic as the body.
#pragma once
#include <xsimd/xsimd.hpp>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstddef>

namespace ct::simd {

using B = xsimd::batch<float>;
constexpr std::size_t W = B::size;

#if defined(__AVX2__)
// Lane i of the mask is set when i < count (AVX2's masked loads and stores read and write only those).
inline __m256i lanes_below(std::size_t count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(count)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#endif

inline B load(const float* p, std::size_t count, float fill = 0.0f) {
    if (count == W) return B::load_unaligned(p);
#if defined(__AVX2__)
    if constexpr (W == 8) {
        const __m256i m = lanes_below(count);
        const __m256 v = _mm256_maskload_ps(p, m);
        return fill == 0.0f ? B(v) : B(_mm256_blendv_ps(_mm256_set1_ps(fill), v, _mm256_castsi256_ps(m)));
    }
#endif
    alignas(64) float buf[W];
    for (std::size_t i = 0; i < W; ++i) buf[i] = i < count ? p[i] : fill;
    return B::load_aligned(buf);
}

inline void store(float* p, const B& v, std::size_t count) {
    if (count == W) {
        v.store_unaligned(p);
        return;
    }
#if defined(__AVX2__)
    if constexpr (W == 8) {
        _mm256_maskstore_ps(p, lanes_below(count), v);
        return;
    }
#endif
    alignas(64) float buf[W];
    v.store_aligned(buf);
    for (std::size_t i = 0; i < count; ++i) p[i] = buf[i];
}

// body(i, count) for i = 0, W, 2W, ...; count is W except for the last, partial block.
template <class Body>
inline void blocks(std::size_t n, Body&& body) {
    std::size_t i = 0;
    for (; i + W <= n; i += W) body(i, W);
    if (i < n) body(i, n - i);
}

inline float hmax(const B& v) {
    alignas(64) float buf[W];
    v.store_aligned(buf);
    return *std::max_element(buf, buf + W);
}

inline float hsum(const B& v) { return xsimd::hadd(v); }

// Sum and max of n floats.
inline float sum(const float* x, std::size_t n) {
    B acc(0.0f);
    blocks(n, [&](std::size_t i, std::size_t c) { acc += load(x + i, c); });
    return hsum(acc);
}

inline float max(const float* x, std::size_t n, float init) {
    B acc(init);
    blocks(n, [&](std::size_t i, std::size_t c) { acc = xsimd::max(acc, load(x + i, c, init)); });
    return hmax(acc);
}

}  // namespace ct::simd
