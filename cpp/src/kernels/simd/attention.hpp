// The fused attention's row loops (ops/attention.cpp): the softmax of one row of scores, with attention
// dropout, and its backward, one query row per call, per level (tables.hpp). Masking (the filled scores)
// and the products stay in the op.
#pragma once
#include <cstddef>
#include <cstdint>

#include "tables.hpp"

namespace ct::kernels {

struct AttentionLoops {
    // p = softmax(p) in place over n floats (the row's scores, already scaled and filled where masked):
    // p_j = exp(p_j - max) / sum exp(p - max). With keep (dropout's keep mask, else nullptr), also
    // attn_j = p_j * (keep_j ? keep_scale : 0), keep_scale = 1/(1-dropout p).
    void (*forward_row)(float* p, std::size_t n, const std::uint8_t* keep, float keep_scale, float* attn);
    // ds = p (dp - sum dp p) over n floats, given the softmax output p and the incoming dattn, with
    // dp = dattn, or dattn * (keep_j ? keep_scale : 0) with keep (dropout's keep mask, else nullptr).
    // ds is written (not added to); the op zeroes it where masked afterwards.
    void (*backward_row)(const float* p, const float* dattn, const std::uint8_t* keep, float keep_scale, float* ds,
                         std::size_t n);
    // Decoding's two products for one query row and `heads` heads of d floats, the heads side by side in each
    // row (row j of k: head h at k + j ldk + h d): s[h n + j] = scale q_h . k_j,h for the n keys, and
    // out_h = sum_j p[h n + j] v_j,h (out written, not added to). A row at a time, all its heads together: one
    // sequential pass over the keys and one over the values, where a product per head reads the rows in d-float
    // pieces ldk apart, heads times over. With bf16 (an autocast region's products) every operand (q, k, p, v) is
    // rounded to bf16 as it is read and the exact products add in float32: the "emulated" kernel's maths
    // (bf16.hpp), on every CPU.
    void (*one_query_scores)(const float* q, const float* k, std::size_t ldk, std::size_t n, std::size_t heads,
                             std::size_t d, float scale, bool bf16, float* s);
    void (*one_query_apply)(const float* p, std::size_t n, const float* v, std::size_t ldv, std::size_t heads,
                            std::size_t d, bool bf16, float* out);
};

CT_LOOP_TABLES(AttentionLoops, attention_loops)

}  // namespace ct::kernels
