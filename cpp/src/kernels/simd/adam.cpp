// adam.hpp's loop, for one level (tables.hpp).
#include "adam.hpp"

// Rounding must follow torch's kernels op by op (see update): no implicit fused multiply-add.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "per_level.hpp"

namespace ct::kernels {
namespace CT_LOOP_LEVEL {

namespace {

using simd::B;

// One parameter's update, float32 arithmetic rounded as torch's CPU kernels round it: add with
// alpha, lerp and addcmul are fused multiply-adds there (Vectorized::fmadd), the rest is one
// rounding per op. simd::fma spells out the fused ones; contraction is off for this file so the
// compiler fuses nothing else (e.g. AdamW's p * (1 - lr wd) must be rounded before the update).
// Vectorised with xsimd: the same operations in the same order, each rounded once (vector
// sqrt and division are correctly rounded like the scalar ones, fma is fused in both). A
// scalar loop does not vectorise (std::sqrt may set errno).
void update(float* p, const float* grad, float* m, float* v, std::size_t n, const AdamCoefficients& k) {
    const bool l2 = k.l2, decay_p = k.decay_p;
    const float w1 = k.w1;
    const B vdecay(k.decay), vwd(k.wd), vw1(w1), vone_minus_w1(1.0f - w1), vb2(k.b2), vomb2(k.one_minus_b2),
        vbc2s(k.bc2s), veps(k.eps), vneg(k.neg_step_size);
    const bool lerp_low = w1 < 0.5f;
    simd::blocks(n, [&](std::size_t i, std::size_t c) {
        B pi = simd::load(p + i, c);
        if (decay_p) pi = pi * vdecay;
        const B gr = simd::load(grad + i, c);
        const B gi = l2 ? simd::fma(pi, vwd, gr) : gr;
        const B mo = simd::load(m + i, c);
        // lerp: self + w (end - self) for w < 0.5, else end - (end - self) (1 - w)
        const B diff = gi - mo;
        const B mi = lerp_low ? simd::fma(vw1, diff, mo) : simd::fma(-diff, vone_minus_w1, gi);
        const B vi = simd::fma(vomb2 * gi, gi, simd::load(v + i, c) * vb2);
        const B denom = xsimd::sqrt(vi) / vbc2s + veps;
        simd::store(m + i, mi, c);
        simd::store(v + i, vi, c);
        simd::store(p + i, pi + (vneg * mi) / denom, c);
    });
}

}  // namespace
}  // namespace CT_LOOP_LEVEL

CT_LOOP_TABLE(AdamLoops, adam_loops) = {CT_LOOP_LEVEL::update};
CT_LOOP_SELECT(AdamLoops, adam_loops)

}  // namespace ct::kernels
