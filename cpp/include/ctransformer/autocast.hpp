// Automatic mixed precision, as torch.autocast("cpu", dtype=torch.bfloat16): inside a region, the
// products (linear, matmul and attention's two products) multiply bf16-rounded operands and accumulate
// in fp32 (bf16.hpp); everything else (softmax, layer norm, the losses, the optimizer) stays fp32, and
// so do the parameters (master weights). An op remembers whether it ran in a region, and its backward
// products run the same way, wherever backward() is called.
//
// Unlike torch, an autocast product returns fp32, not bf16: the fp32 sum is not rounded again (it costs
// nothing to keep, and the next op would widen it anyway).
//
// Parameters (leaf tensors that require grad) are rounded to bf16 once and kept, per thread, until the
// thread's outermost region ends: a weight is read as bf16 by every product. Adam::step rounds each parameter it updates
// into its copy as it writes it. As in torch, writing a parameter in place inside a region by other
// means leaves its cached copy stale until the region ends.
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

// op(w) as a gemm_bf16 operand: the cached bf16 copy when w is a parameter (rounded now if this is its
// first use since the cache was cleared and a region is active), else w's fp32 data, rounded by the kernel.
Bf16Operand operand(const Tensor& w, int ld, bool trans);

// w's cached bf16 copy, or null: an optimizer that changes w rewrites it in the same pass (Adam::step),
// so the next step's products find it current without another pass over the weights.
bf16_t* cached_copy(const Tensor& w);

// Forget every cached copy and free its memory. (The end of a region forgets the copies but keeps their
// memory for the next region's.)
void clear_cache();
// How many parameters have a cached copy (tests).
std::size_t cached_count();

}  // namespace ct::autocast
