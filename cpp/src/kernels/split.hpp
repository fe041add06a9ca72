// Where a product goes and when it is split over threads: every size rule of the products in one place
// (kernel_table() prints them). Each was measured; the reason stays beside it.
#pragma once
#include <cstddef>

namespace ct::kernels {

// --- where a float32 or bf16 product goes ----------------------------------------------------------------
// Products up to this many multiply-adds skip the BLAS: a call costs 0.2-1 us before any work, and an
// incremental decoding step's attention is hundreds of 1 x len x d_k products per layer (tiny model: 4 heads x
// 32 rows, len <= 50, d_k 8), which would spend most of the step in call overhead.
constexpr std::size_t kDirectMacs = 8192;
// Up to kFewRows rows of x W^T go to the few-rows kernel (kernels/fp32/few_rows.cpp), which reads W once for all
// of them: sgemm packs all of B first, which for one row of a decoding step costs ~4.6x the product (8000x256
// weight: 888 us vs 191 us; equal at 4 rows), and beam 5 at batch 1 on the Multi30k model decodes 74-121
// sentences/s there against 44-50 through the BLAS. With AVX2, at 1 and 2 rows it takes four rows of W at a time, which
// streams a weight that does not fit in cache faster than OpenBLAS's sgemv (GPT-2 124M at batch 1 on a Zen 3,
// 2 threads, 8 runs alternated: median 21.9 ms a token against 23.2, faster or equal in each pair; 93% of the
// machine's read bandwidth at best) and ties it on a small GPT's 256-wide weights; with AVX-512 one row at a time, as one
// stream (kernels/fp32/few_rows.cpp). Where the kernel level has no such kernel, and for the other layouts, up to kGemvRows rows are that
// many sgemv calls. bf16 takes its few-rows kernel up to kFewRows as well: a beam of up to 8 at batch 1 (through
// the packed kernel, which packs the weight on every call, bf16 beam 5 decodes slower than fp32).
constexpr int kGemvRows = 2;
constexpr int kFewRows = 8;
// Inside a decoding call (decode::PackedWeights) a product of kPackedMinRows to kPackedMaxRows rows reads its
// weight's packed copy. Below, the few-rows kernel streams W faster. Above, OpenBLAS's sgemm is as fast or faster:
// GPT-2's 768 -> 2304 projection on a Zen 3 (AVX2, 2 threads, best of many), packed over sgemm 0.71 at 8 rows (few-
// rows kernel: 0.32 against 0.23 ms), 0.85 at 32, 0.86 at 256, 0.97 at 512, 1.00 at 1024, 1.15 at 4096 (a GPT's
// prompts at batch 32).
constexpr int kPackedMinRows = kGemvRows + 1;
constexpr int kPackedMaxRows = 1024;

// --- when it is split over threads ------------------------------------------------------------------------
// Below ~4 MFLOP (~40 us on one core) a product stays on one thread: handing half of it to the other thread
// costs a few us, and on a loaded machine a worker that was preempted holding a piece costs a scheduler tick
// (the tiny model's step runs faster single-threaded). float32 and bf16 alike.
constexpr double kSplitFlops = 2.0 * 128 * 128 * 128;
constexpr int kMinBlock = 32;  // float32: rows (or columns) per piece at least
// float32 pieces per thread: 2 lets the caller take over half of a descheduled worker's share; more would
// pack B (or A) once more per piece (parallel.hpp's default is 4).
constexpr std::size_t kGemmPiecesPerThread = 2;
// Decoding's packed float32 products (ops/linear.cpp) in up to 8 pieces per thread, claimed as threads come free:
// with one piece each, a thread that runs slower (a core shared with another tenant's work, a worker woken
// late) holds the whole product up (greedy decoding of the base model at batch 32, AVX2 kernels: median
// 1290-1348 ms against 1345-1442 with one piece per thread). The int8 products keep one piece per thread:
// more pieces are slower there.
constexpr std::size_t kPackedPiecesPerThread = 8;
// Products of a few rows are bound by reading the weight, not by arithmetic: two threads reading halves of a
// weight of 256 KiB or more beat one (every Linear of the small model's decoding step at batch 1: 21.0 ms for
// 50 tokens with the 256 x 256 projections split, 23.4 without). Bytes, so float32 and bf16 share it.
constexpr std::size_t kSplitWeightBytes = std::size_t(256) << 10;
// int8: below ~1M multiply-adds (a few microseconds in VNNI) a product stays on one thread: the hand-off costs
// about as much. (A product of 32 x 256 x 256 alone is faster on one thread, but decoding at batch 32 is ~10%
// slower end to end with the bound at 4M: the second thread then sleeps between the larger products.) Threads
// take whole panels of kInt8Panel columns.
constexpr std::size_t kSplitInt8Macs = std::size_t(1) << 20;
constexpr std::size_t kInt8Panel = 64;

}  // namespace ct::kernels
