// The size of a GPT generation's output, checked before anything is allocated (shared by
// decode::generate and GPT::generate). max_new_tokens comes straight from the user: b x (t +
// max_new_tokens) must not overflow, and the ids must fit in memory, else a request for 10**9
// tokens zero-fills gigabytes (uninterruptibly) before it fails.
#pragma once
#include <cstdint>
#include <string>

#include "ctransformer/runtime/allocator.hpp"
#include "ctransformer/error.hpp"
#include "ctransformer/runtime/tensor.hpp"

namespace ct::decode::detail {

// t + max_new_tokens, the output's length.
inline std::size_t checked_generate_length(std::size_t b, std::size_t t, std::size_t max_new_tokens,
                                           const std::string& fn) {
    const std::string what = fn + ": max_new_tokens = " + std::to_string(max_new_tokens);
    std::size_t length;
    if (__builtin_add_overflow(t, max_new_tokens, &length))
        throw ValueError(what + " makes the output length t + max_new_tokens overflow a 64-bit count");
    const std::size_t ids = checked_mul(b, length, what + " (the output, batch x (t + max_new_tokens) ids)");
    // The ids are built, then copied out (a NumPy array for Python): twice their size at the end.
    std::size_t bytes;
    if (__builtin_mul_overflow(ids, 2 * sizeof(std::int64_t), &bytes))
        throw MemoryError(what + ": the output " + shape_str({b, length}) +
                          " of int64 ids needs more bytes than a 64-bit count holds");
    check_fits_in_memory(bytes, what + ": the output " + shape_str({b, length}) + " of int64 ids (built, then copied)");
    return length;
}

}  // namespace ct::decode::detail
