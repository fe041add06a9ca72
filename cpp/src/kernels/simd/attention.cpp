// attention.hpp's loops, for one level (tables.hpp). The softmax's partial last block is padded with -inf,
// whose exp adds 0 to the sum.
#include "attention.hpp"

#include <limits>

#include "per_level.hpp"

namespace ct::kernels {
namespace CT_LOOP_LEVEL {

namespace {

using simd::B;

// softmax(row) in place, then attn = P * (0 or 1/(1-p)) with dropout.
void forward_row(float* row, std::size_t n, const std::uint8_t* keep, float keep_scale, float* attn) {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    const B mx(simd::max(row, n, kNegInf));
    B acc(0.0f);
    simd::blocks(n, [&](std::size_t j, std::size_t c) {
        const B e = xsimd::exp(simd::load(row + j, c, kNegInf) - mx);
        simd::store(row + j, e, c);
        acc += e;
    });
    const B inv(1.0f / simd::hsum(acc));
    simd::blocks(n, [&](std::size_t j, std::size_t c) { simd::store(row + j, simd::load(row + j, c) * inv, c); });
    if (keep) {  // attn = P * (0 or 1/(1-p)); locals, so no store can alias them
        const std::uint8_t* kr = keep;
        float* ar = attn;
        const float* pr = row;
        const float ks = keep_scale;
        const std::size_t lk = n;
        for (std::size_t j = 0; j < lk; ++j) ar[j] = pr[j] * (kr[j] ? ks : 0.0f);
    }
}

// dS = P * (dP - rowsum(dP * P)), with dP = dattn (times the dropout multiplier).
void backward_row(const float* pr, const float* gr, const std::uint8_t* keep, float keep_scale, float* dr,
                  std::size_t n) {
    if (keep) {  // dP = dattn * (0 or 1/(1-p))
        const std::uint8_t* kr = keep;
        const float ks = keep_scale;
        for (std::size_t j = 0; j < n; ++j) dr[j] = gr[j] * (kr[j] ? ks : 0.0f);
        gr = dr;
    }
    B acc(0.0f);
    simd::blocks(n, [&](std::size_t j, std::size_t c) { acc += simd::load(gr + j, c) * simd::load(pr + j, c); });
    const B dot(simd::hsum(acc));
    simd::blocks(n, [&](std::size_t j, std::size_t c) {
        simd::store(dr + j, simd::load(pr + j, c) * (simd::load(gr + j, c) - dot), c);
    });
}

// x rounded to bf16 (to nearest, ties to even, as to_bf16) and widened back; a NaN stays NaN.
inline B bf16_rounded(const B& x) {
    using U = xsimd::batch<std::uint32_t>;
    const U u = xsimd::bitwise_cast<U>(x);
    const U r = (u + U(0x7FFFu) + ((u >> 16) & U(1u))) & U(0xFFFF0000u);
    return xsimd::select(xsimd::isnan(x), x, xsimd::bitwise_cast<B>(r));
}

// An operand as the product reads it: itself, or with bf16 products (ROUND) rounded to bf16.
template <bool ROUND>
inline B operand(const B& x) {
    if constexpr (ROUND)
        return bf16_rounded(x);
    else
        return x;
}

// W keys at a time per head (W accumulators, their sums in one transposing tree, sums_of), the rows left one by one.
template <bool ROUND>
void scores_rows(const float* q, const float* k, std::size_t ldk, std::size_t n, std::size_t heads, std::size_t d,
                 float scale, float* s) {
    std::size_t j0 = 0;
    for (; j0 + simd::W <= n; j0 += simd::W) {
        for (std::size_t h = 0; h < heads; ++h) {
            const float* kh = k + j0 * ldk + h * d;
            B acc[simd::W];
            for (std::size_t w = 0; w < simd::W; ++w) acc[w] = B(0.0f);
            simd::blocks(d, [&](std::size_t i, std::size_t c) {
                const B qv = operand<ROUND>(simd::load(q + h * d + i, c));
                for (std::size_t w = 0; w < simd::W; ++w)
                    acc[w] = simd::fma(qv, operand<ROUND>(simd::load(kh + w * ldk + i, c)), acc[w]);
            });
            (simd::sums_of(acc) * B(scale)).store_unaligned(s + h * n + j0);
        }
    }
    for (std::size_t j = j0; j < n; ++j) {
        const float* kj = k + j * ldk;
        for (std::size_t h = 0; h < heads; ++h) {
            B acc(0.0f);
            simd::blocks(d, [&](std::size_t i, std::size_t c) {
                acc = simd::fma(operand<ROUND>(simd::load(q + h * d + i, c)), operand<ROUND>(simd::load(kj + h * d + i, c)),
                                acc);
            });
            s[h * n + j] = scale * simd::hsum(acc);
        }
    }
}

// out_h += p_j v_j,h four rows at a time (each out vector loaded and stored once per four rows, kept in L1:
// heads d floats), then the rows left one by one.
template <bool ROUND>
void apply_rows(const float* p, std::size_t n, const float* v, std::size_t ldv, std::size_t heads, std::size_t d,
                float* out) {
    for (std::size_t i = 0; i < heads * d; ++i) out[i] = 0.0f;
    std::size_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const float* vj = v + j * ldv;
        for (std::size_t h = 0; h < heads; ++h) {
            const float* ph = p + h * n + j;
            const B p0 = operand<ROUND>(B(ph[0])), p1 = operand<ROUND>(B(ph[1])), p2 = operand<ROUND>(B(ph[2])),
                    p3 = operand<ROUND>(B(ph[3]));
            simd::blocks(d, [&](std::size_t i, std::size_t c) {
                const std::size_t at = h * d + i;
                B acc = simd::load(out + at, c);
                acc = simd::fma(p0, operand<ROUND>(simd::load(vj + at, c)), acc);
                acc = simd::fma(p1, operand<ROUND>(simd::load(vj + ldv + at, c)), acc);
                acc = simd::fma(p2, operand<ROUND>(simd::load(vj + 2 * ldv + at, c)), acc);
                acc = simd::fma(p3, operand<ROUND>(simd::load(vj + 3 * ldv + at, c)), acc);
                simd::store(out + at, acc, c);
            });
        }
    }
    for (; j < n; ++j) {
        const float* vj = v + j * ldv;
        for (std::size_t h = 0; h < heads; ++h) {
            const B pj = operand<ROUND>(B(p[h * n + j]));
            simd::blocks(d, [&](std::size_t i, std::size_t c) {
                const std::size_t at = h * d + i;
                simd::store(out + at, simd::fma(pj, operand<ROUND>(simd::load(vj + at, c)), simd::load(out + at, c)), c);
            });
        }
    }
}

void one_query_scores(const float* q, const float* k, std::size_t ldk, std::size_t n, std::size_t heads, std::size_t d,
                      float scale, bool bf16, float* s) {
    if (bf16)
        scores_rows<true>(q, k, ldk, n, heads, d, scale, s);
    else
        scores_rows<false>(q, k, ldk, n, heads, d, scale, s);
}

void one_query_apply(const float* p, std::size_t n, const float* v, std::size_t ldv, std::size_t heads, std::size_t d,
                     bool bf16, float* out) {
    if (bf16)
        apply_rows<true>(p, n, v, ldv, heads, d, out);
    else
        apply_rows<false>(p, n, v, ldv, heads, d, out);
}

}  // namespace
}  // namespace CT_LOOP_LEVEL

CT_LOOP_TABLE(AttentionLoops, attention_loops) = {CT_LOOP_LEVEL::forward_row, CT_LOOP_LEVEL::backward_row,
                                                  CT_LOOP_LEVEL::one_query_scores, CT_LOOP_LEVEL::one_query_apply};
CT_LOOP_SELECT(AttentionLoops, attention_loops)

}  // namespace ct::kernels
