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
// copy stale until the region ends. The copies live in the thread's weight cache (cpp/src/kernels/
// weight_cache.hpp), beside decoding's packed weights.
#pragma once
#include <memory>

#include "ctransformer/bf16.hpp"
#include "ctransformer/runtime/tensor.hpp"

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

// Forget every cached copy and free its memory. (The end of a region forgets the copies but keeps their
// memory for the next region's.)
void clear_cache();
// How many parameters have a cached copy (tests).
std::size_t cached_count();

}  // namespace ct::autocast
