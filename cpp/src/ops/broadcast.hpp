// NumPy broadcasting for the elementwise ops: the output shape, and a walk over the output that
// hands each element's offsets into the (possibly smaller) inputs.
#pragma once
#include <string>
#include <vector>

#include "ctransformer/error.hpp"
#include "ctransformer/runtime/tensor.hpp"

namespace ct::detail {

// `what` names the op, a_name and b_name its two arguments, for the error message.
inline Shape broadcast_shapes(const Shape& a, const Shape& b, const std::string& what,
                              const std::string& a_name = "input", const std::string& b_name = "other") {
    const std::size_t rank = std::max(a.size(), b.size());
    Shape out(rank);
    for (std::size_t i = 0; i < rank; ++i) {
        const std::size_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
        const std::size_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
        if (da != db && da != 1 && db != 1)
            throw ValueError(what + ": " + a_name + " of shape " + shape_str(a) + " and " + b_name + " of shape " +
                             shape_str(b) + " cannot be broadcast together (dimension " + std::to_string(i) + ": " +
                             std::to_string(da) + " vs " + std::to_string(db) + ")");
        out[i] = da == 1 ? db : da;
    }
    return out;
}

// Strides (in elements) of `in` seen as a tensor of shape `out`: 0 along broadcast dimensions.
inline std::vector<std::size_t> broadcast_strides(const Shape& in, const Shape& out) {
    std::vector<std::size_t> strides(out.size(), 0);
    std::size_t stride = 1;
    for (std::size_t i = in.size(); i-- > 0;) {
        const std::size_t o = i + (out.size() - in.size());
        strides[o] = in[i] == 1 ? 0 : stride;
        stride *= in[i];
    }
    return strides;
}

// Calls f(i, ia, ib) for every element i of `out`, with ia and ib the offsets into the inputs.
template <class F>
void for_each_broadcast(const Shape& out, const std::vector<std::size_t>& sa, const std::vector<std::size_t>& sb,
                        F&& f) {
    const std::size_t rank = out.size(), n = numel_of(out);
    if (n == 0) return;
    if (rank == 0) { f(0, 0, 0); return; }
    const std::size_t inner = out[rank - 1], ia_step = sa[rank - 1], ib_step = sb[rank - 1];
    std::vector<std::size_t> index(rank, 0);
    std::size_t ia = 0, ib = 0;
    for (std::size_t i = 0; i < n; i += inner) {
        for (std::size_t j = 0; j < inner; ++j) f(i + j, ia + j * ia_step, ib + j * ib_step);
        for (std::size_t d = rank - 1; d-- > 0;) {  // advance the outer multi-index like an odometer
            ++index[d];
            ia += sa[d];
            ib += sb[d];
            if (index[d] < out[d]) break;
            ia -= sa[d] * out[d];
            ib -= sb[d] * out[d];
            index[d] = 0;
        }
    }
}

}  // namespace ct::detail
