// PositionalEncoding(d_hid, n_position): adds a fixed sinusoid table to its input (the post-norm Transformer).
// The table is a BUFFER "pos_table" of shape (1, n_position, d_hid): in the state dict, never a
// parameter, never trained. It is computed in float64 and then cast to float32, as jadore801120's NumPy code.
// The Marian layout names it "weight", of shape (n_position, d_hid), as Hugging Face's frozen embedding.
#pragma once
#include "ctransformer/nn/module.hpp"
#include "ctransformer/nn/transformer_config.hpp"

namespace ct::nn {

class PositionalEncoding : public Module {
public:
    explicit PositionalEncoding(std::size_t d_hid, std::size_t n_position = 200,
                                PositionalFormula formula = PositionalFormula::Paired, Layout layout = Layout::PostNorm);
    // x (b, len, d_hid) + pos_table[:, start:start + len]: x's positions begin at `start` (cached
    // decoding feeds the positions after those it holds). ValueError when start + len > n_position.
    Tensor forward(const Tensor& x, std::size_t start = 0) const;
    // Rows [start, start + len) of the table, (1, len, d_hid), as a constant.
    Tensor table(std::size_t len, std::size_t start = 0) const;
    static Array sinusoid_table(std::size_t n_position, std::size_t d_hid, PositionalFormula formula);
    std::string type_name() const override { return "PositionalEncoding"; }

    Tensor pos_table;
    const std::size_t d_hid, n_position;
    const PositionalFormula formula;
};

}  // namespace ct::nn
