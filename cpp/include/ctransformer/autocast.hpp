// Automatic mixed precision, as torch.autocast("cpu", dtype=torch.bfloat16): inside a region, the
// products (linear, matmul and attention's two products) multiply bf16-rounded operands and accumulate
// in fp32 (bf16.hpp); everything else (softmax, layer norm, the losses, the optimizer) stays fp32, and
// so do the parameters (master weights). An op remembers whether it ran in a region, and its backward
// products run the same way, wherever backward() is called.
//
// Unlike torch, an autocast product returns fp32, not bf16: the fp32 sum is not rounded again (it costs
// nothing to keep, and the next op would widen it anyway).
//
// Parameters (leaf tensors that require grad) read by a product may get a bf16 copy, kept per thread
// until the thread's outermost region ends. An inference product (no gradient recorded: decoding reads
// every weight once per token) rounds the weight into its copy on first use. A training product does
// not: the packed kernel rounds the fp32 weight as it packs it, and a pass of its own to round it first
// would cost more than it saves when the region holds one step (a torch-style loop). It notes the weight
// instead, and Adam::step inside the region writes that weight's copy as it writes the new values, so
// the next step in the same region (ctransformer-train holds one around its loop) packs from bf16, half
// the bytes. As in torch, writing a parameter in place inside a region by other means leaves its cached
// copy stale until the region ends.
#pragma once
#include <memory>

#include "ctransformer/bf16.hpp"
#include "ctransformer/tensor.hpp"

namespace ct::autocast {

// Whether the calling thread is inside a bf16 region.
bool enabled();

// Enters (on = true) or leaves nothing (on = false: a region that turns autocast off) for its lifetime.
class Guard {
public:
    explicit Guard(bool on = true);
    ~Guard();
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
private:
    bool previous_;
};

// op(w) as a gemm_bf16 operand: the cached bf16 copy when w is a parameter that has one, else w's fp32
// data, rounded by the kernel. round_now: make the copy first if there is none and a region is active
// (an inference product; a training product passes false).
Bf16Operand operand(const Tensor& w, int ld, bool trans, bool round_now);

// The bf16 copy an optimizer writes whole as it changes w (Adam::step): null unless a product of this
// region read w. The next step's products then find it current without another pass over the weights.
bf16_t* copy_to_write(const Tensor& w);

// Forget every cached copy and free its memory. (The end of a region forgets the copies but keeps their
// memory for the next region's.)
void clear_cache();
// How many parameters have a cached copy (tests).
std::size_t cached_count();

}  // namespace ct::autocast
