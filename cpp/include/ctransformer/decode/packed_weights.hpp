// Weights packed once for a decoding loop's products. While a PackedWeights lives on a thread, linear() on
// that thread sends a product of 3 or more rows (a batch of sentences, or of beams) against a parameter,
// outside autograd and autocast, to a kernel that reads the parameter packed. A parameter is packed on its
// second such product (packing costs about 2 products; a weight used once per call, as the encoder's, would
// pay for nothing), and kept until the thread's outermost PackedWeights ends. sgemm packs its operands on
// every call instead: a fifth of a float32 beam-search step at batch 32 (the 8000 x 256 output projection
// is 8 MB). greedy_decode and beam_search
// hold one; a loop of one's own over a StepDecoder, or over many calls (the Translator's batches), can
// too. The weights must not change while it lives (the copies would be stale), and the copies take as
// much memory as the weights they copy. Another legal float32 summation order than the BLAS's; CPUs
// with AVX-512 or AVX2 only (elsewhere, and at kernel level "portable", it does nothing).
#pragma once
#include <cstddef>

namespace ct::decode {

class PackedWeights {
public:
    PackedWeights();
    ~PackedWeights();
    PackedWeights(const PackedWeights&) = delete;
    PackedWeights& operator=(const PackedWeights&) = delete;
    // How many weights this thread's region holds packed (0 outside one): which products read a packed
    // copy, whatever the BLAS's kernel would have given.
    static std::size_t count();
};

}  // namespace ct::decode
