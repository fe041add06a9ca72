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
};

CT_LOOP_TABLES(AttentionLoops, attention_loops)

}  // namespace ct::kernels
