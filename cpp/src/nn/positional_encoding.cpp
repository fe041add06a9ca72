#include "ctransformer/nn/positional_encoding.hpp"

#include <cmath>
#include <cstring>

#include "ctransformer/error.hpp"
#include "ctransformer/ops/elementwise.hpp"

namespace ct::nn {

PositionalEncoding::PositionalEncoding(std::size_t d, std::size_t n, PositionalFormula f, Layout layout)
    : d_hid(d), n_position(n), formula(f) {
    if (d == 0 || n == 0)
        throw ValueError("PositionalEncoding: d_hid and n_position must be positive, got " + std::to_string(d) + " and " +
                         std::to_string(n));
    Array table = sinusoid_table(n, d, f);
    if (layout == Layout::Marian) {   // MarianSinusoidalPositionalEmbedding: a frozen (n_position, d) 'weight'
        table.reshape({n, d});
        pos_table = Tensor(std::move(table));
        register_buffer("weight", &pos_table);
        return;
    }
    pos_table = Tensor(std::move(table));
    register_buffer("pos_table", &pos_table);   // not a parameter: never trained
}

// In float64, then rounded to float32 once, as the seeds (NumPy / math, then a FloatTensor).
Array PositionalEncoding::sinusoid_table(std::size_t n_position, std::size_t d_hid, PositionalFormula formula) {
    Array table = new_array({1, n_position, d_hid}, "PositionalEncoding (n_position x d_hid table)");
    for (std::size_t pos = 0; pos < n_position; ++pos)
        for (std::size_t j = 0; j < d_hid; ++j) {
            // the post-norm reference: position / np.power(10000, 2 * (hid_j // 2) / d_hid)
            // the pre-norm reference: pos / 1e4 ** (i / d_model)
            const double exponent = formula == PositionalFormula::PerIndex ? double(j) / double(d_hid)
                                                                           : double(2 * (j / 2)) / double(d_hid);
            const double angle = double(pos) / std::pow(10000.0, exponent);
            // Halves: feature j's value goes to column j / 2 (sines) or sines + j / 2 (cosines).
            const std::size_t sines = (d_hid + 1) / 2;
            const std::size_t col = formula != PositionalFormula::Halves ? j : j % 2 == 0 ? j / 2 : sines + j / 2;
            table.data()[pos * d_hid + col] = float(j % 2 == 0 ? std::sin(angle) : std::cos(angle));
        }
    return table;
}

Tensor PositionalEncoding::table(std::size_t len, std::size_t start) const {
    if (start > n_position || len > n_position - start)
        throw ValueError("PositionalEncoding: sequence length " + std::to_string(len) +
                         (start ? " from position " + std::to_string(start) + " runs past" : " is longer than") +
                         " n_position = " + std::to_string(n_position));
    Array rows = Array::from_shape({1, len, d_hid});
    std::memcpy(rows.data(), pos_table.data() + start * d_hid, len * d_hid * sizeof(float));
    return Tensor(std::move(rows));   // a constant: pos_table[:, start:start + len].clone().detach()
}

Tensor PositionalEncoding::forward(const Tensor& x, std::size_t start) const {
    if (x.dim() != 3 || x.size(2) != d_hid)
        throw ValueError("PositionalEncoding.forward: x must be (batch, length, " + std::to_string(d_hid) + "), got " +
                         shape_str(x.shape()));
    return add(x, table(x.size(1), start));
}

}  // namespace ct::nn
