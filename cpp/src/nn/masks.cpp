#include "ctransformer/nn/masks.hpp"

#include "ctransformer/error.hpp"
#include "ops/broadcast.hpp"

namespace ct::nn {

Mask get_pad_mask(const IndexArray& seq, std::int64_t pad_idx) {
    if (seq.shape.size() != 2)
        throw ValueError("get_pad_mask: seq must be a 2-D (batch, length) array of token ids, got shape " +
                         shape_str(seq.shape));
    Mask m;
    m.shape = {seq.shape[0], 1, seq.shape[1]};
    m.data.resize(seq.data.size());
    for (std::size_t i = 0; i < seq.data.size(); ++i) m.data[i] = seq.data[i] != pad_idx;
    return m;
}

Mask get_subsequent_mask(std::size_t len) {
    Mask m;
    m.shape = {1, len, len};
    m.data.assign(len * len, 0);
    for (std::size_t i = 0; i < len; ++i)
        for (std::size_t j = 0; j <= i; ++j) m.data[i * len + j] = 1;   // 1 - triu(ones, diagonal=1)
    return m;
}

Mask get_subsequent_mask(const IndexArray& seq) {
    if (seq.shape.size() != 2)
        throw ValueError("get_subsequent_mask: seq must be a 2-D (batch, length) array of token ids, got shape " +
                         shape_str(seq.shape));
    return get_subsequent_mask(seq.shape[1]);
}

Mask mask_and(const Mask& a, const Mask& b) {
    Mask out;
    out.shape = ct::detail::broadcast_shapes(a.shape, b.shape, "mask_and");
    out.data.resize(numel_of(out.shape));
    ct::detail::for_each_broadcast(out.shape, ct::detail::broadcast_strides(a.shape, out.shape),
                                   ct::detail::broadcast_strides(b.shape, out.shape),
                                   [&](std::size_t i, std::size_t ia, std::size_t ib) {
                                       out.data[i] = a.data[ia] && b.data[ib];
                                   });
    return out;
}

}  // namespace ct::nn
