// Vector helpers for the hand-written kernels, on xsimd (used directly here only; xtensor's own
// XTENSOR_USE_XSIMD stays off, so Array's type is the same in every translation unit).
//
// xsimd's exp, log and tanh are vectorised Cephes-style polynomials, within 1-2 ulp of libm's and
// 12x (exp) to 23x (tanh) faster on this machine. Loops walk `W` floats at a time and finish with
// one partial batch (padded; masked loads and stores touch only the tail's own elements),
// so the tail gets exactly the same arithmetic as the body.
#pragma once
#include <xsimd/xsimd.hpp>

// Masked tails are the one place that needs raw intrinsics (xsimd 8 has no masked load/store).
// Each variant sits behind the preprocessor macro of the instruction set it uses, and is taken
// only when xsimd's default batch is that set's width; every other target (SSE2/SSE4, a plain
// x86-64 build, NEON on aarch64) pads the tail through a small buffer. All give the same numbers:
// the tail's lanes get the same arithmetic as the body's whatever way they are loaded.
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstddef>

// The helpers sit in an inline namespace named after the level they are compiled for (CT_SIMD_NS: a level of
// kernels/simd/, or `build` for the rest of the core): the same helper compiled for two levels is then two
// symbols, never one the linker picks at random (kernels/simd/per_level.hpp).
#ifndef CT_SIMD_NS
#define CT_SIMD_NS build
#endif

namespace ct::simd {
inline namespace CT_SIMD_NS {

using B = xsimd::batch<float>;
constexpr std::size_t W = B::size;

#if defined(__AVX512F__)
// AVX-512: the tail is a mask register, lane i set when i < count.
static_assert(W == 16, "with AVX-512 enabled, xsimd's default float batch is 16 lanes");
inline __mmask16 lanes_below(std::size_t count) { return __mmask16((1u << count) - 1u); }

inline B load_partial(const float* p, std::size_t count, float fill) {
    return B(_mm512_mask_loadu_ps(_mm512_set1_ps(fill), lanes_below(count), p));
}
inline void store_partial(float* p, const B& v, std::size_t count) {
    _mm512_mask_storeu_ps(p, lanes_below(count), v);
}
#elif defined(__AVX2__)
// AVX2: lane i of an integer mask is all ones when i < count; maskload/maskstore touch only those.
static_assert(W == 8, "with AVX2 (and no AVX-512) enabled, xsimd's default float batch is 8 lanes");
inline __m256i lanes_below(std::size_t count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(count)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

inline B load_partial(const float* p, std::size_t count, float fill) {
    const __m256i m = lanes_below(count);
    const __m256 v = _mm256_maskload_ps(p, m);
    return fill == 0.0f ? B(v) : B(_mm256_blendv_ps(_mm256_set1_ps(fill), v, _mm256_castsi256_ps(m)));
}
inline void store_partial(float* p, const B& v, std::size_t count) { _mm256_maskstore_ps(p, lanes_below(count), v); }
#else
// Any other target: the tail goes through a padded buffer.
inline B load_partial(const float* p, std::size_t count, float fill) {
    alignas(64) float buf[W];
    for (std::size_t i = 0; i < W; ++i) buf[i] = i < count ? p[i] : fill;
    return B::load_aligned(buf);
}
inline void store_partial(float* p, const B& v, std::size_t count) {
    alignas(64) float buf[W];
    v.store_aligned(buf);
    for (std::size_t i = 0; i < count; ++i) p[i] = buf[i];
}
#endif

// count floats from p (count <= W); the lanes past count hold fill.
inline B load(const float* p, std::size_t count, float fill = 0.0f) {
    return count == W ? B::load_unaligned(p) : load_partial(p, count, fill);
}

// The first count lanes of v to p (count <= W); nothing past p + count is touched.
inline void store(float* p, const B& v, std::size_t count) {
    if (count == W)
        v.store_unaligned(p);
    else
        store_partial(p, v, count);
}

// a * b + c rounded once where the CPU has a fused multiply-add. xsimd 8 has no AVX-512 fma: its
// generic fallback rounds twice, so Adam's moments would drift an ulp from torch's fused kernels.
// Without hardware FMA (plain x86-64, SSE4) this rounds twice too: a software fma per lane
// would cost more than the optimizer step it serves.
#if defined(__AVX512F__)
inline B fma(const B& a, const B& b, const B& c) { return B(_mm512_fmadd_ps(a, b, c)); }
#else
inline B fma(const B& a, const B& b, const B& c) { return xsimd::fma(a, b, c); }
#endif
#if defined(__FMA__) || defined(__AVX512F__) || defined(__ARM_FEATURE_FMA)
constexpr bool fused_multiply_add = true;
#else
constexpr bool fused_multiply_add = false;
#endif

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
    float m = buf[0];  // (not std::max_element: a std:: template left out of line is one symbol for every level)
    for (std::size_t i = 1; i < W; ++i) m = buf[i] > m ? buf[i] : m;
    return m;
}

inline float hsum(const B& v) { return xsimd::hadd(v); }

// Lane i of the result = the sum of v[i]'s lanes, for W vectors: one transposing tree instead of W
// horizontal sums. xsimd 8.1's AVX-512 haddp puts 8 of the 16 sums in the wrong lanes (checked here;
// its AVX and SSE versions are right), so AVX-512 has its own.
#if defined(__AVX512F__)
inline B sums_of(const B* v) {
    __m512 u[8], w[4], z[2];
    for (int i = 0; i < 8; ++i)  // per 128-bit chunk: (a0+a2, b0+b2, a1+a3, b1+b3) of v[2i], v[2i+1]
        u[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; ++i) {  // per chunk: the chunk's sums of v[4i], ..., v[4i+3]
        const __m512d a = _mm512_castps_pd(u[2 * i]), b = _mm512_castps_pd(u[2 * i + 1]);
        w[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    for (int i = 0; i < 2; ++i)  // chunks (0+1, 2+3) of w[2i], then of w[2i+1]
        z[i] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0xDD));
    return B(_mm512_add_ps(_mm512_shuffle_f32x4(z[0], z[1], 0x88), _mm512_shuffle_f32x4(z[0], z[1], 0xDD)));
}
#else
inline B sums_of(const B* v) { return xsimd::haddp(v); }
#endif

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

}  // namespace CT_SIMD_NS
}  // namespace ct::simd
