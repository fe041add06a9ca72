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

}  // namespace
}  // namespace CT_LOOP_LEVEL

CT_LOOP_TABLE(AttentionLoops, attention_loops) = {CT_LOOP_LEVEL::forward_row, CT_LOOP_LEVEL::backward_row};
CT_LOOP_SELECT(AttentionLoops, attention_loops)

}  // namespace ct::kernels
