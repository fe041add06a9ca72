// The copies of parameters that products read instead of their float32 data, in one cache per thread:
//  - packed: decoding's float32 weights in the packed kernel's layout (kernels/fp32/packed.hpp), while a
//    ct::decode::PackedWeights lives on the thread;
//  - bf16: autocast's bf16-rounded weights (ctransformer/autocast.hpp), while a bf16 region lasts.
// An entry is keyed on the parameter's storage and holds it, so the address cannot be reused by another
// tensor while a copy of it is kept. Per thread (as torch's cast cache): a region ending on one thread
// cannot free a copy that another thread's products are reading. Each kind lives as long as its own
// region: the outermost region of a kind ends, and that kind's copies are dropped.
#pragma once
#include <cstddef>
#include <memory>

#include "ctransformer/bf16.hpp"
#include "ctransformer/runtime/tensor.hpp"
#include "fp32/packed.hpp"

namespace ct::weight_cache {

enum class Kind { Packed, Bf16 };

// A region of that kind begins / ends on this thread (nested regions count; the outermost's end drops
// the kind's copies, keeping bf16 buffers for the next region's).
void enter(Kind kind);
void leave(Kind kind);

// w's packed copy for a product (of kPackedMinRows or more rows: the caller's test), or null: outside a
// packed region, for a tensor that is not a parameter (leaf requiring grad) of rank 2, at a kernel level
// without the kernel, and on the weight's first product in the region (weight_cache.cpp says why).
// bf16_rounded: the packed copy of w's values rounded to bf16, for autocast's products where bf16 is emulated
// (a float32 product of rounded operands: the packed kernel computes it as the emulation's sgemm does).
const blas::PackedWeight* packed(const Tensor& w, bool bf16_rounded = false);
// A product of w of more rows than the packed kernel takes (a prompt of a batch: the BLAS computes it) counts as
// a use all the same, so the next product of a few rows packs w and reads the copy: a GPT's first decoding step
// at batch 32 after a 4096-row prompt, which without it would run through sgemm and only the step after pack.
void note_product(const Tensor& w, bool bf16_rounded = false);

// op(w) as a gemm_bf16 operand: the bf16 copy when w is a parameter that has one, else w's float32 data,
// rounded by the kernel. round_now: make the copy first if there is none and a bf16 region is open (an
// inference product; a training product passes false and notes the weight instead, for bf16_to_write).
Bf16Operand bf16_operand(const Tensor& w, int ld, bool trans, bool round_now);

// The bf16 copy an optimizer writes whole as it changes w (Adam::step): null unless a product of this
// region read w. The next step's products then find it current without another pass over the weights.
bf16_t* bf16_to_write(const Tensor& w);

// Lanes (decode/lanes.hpp, serve/engine.cpp) share the packed copies of the thread that starts them: while a
// SharedPacking lives on that thread, it and every thread that joins it (a Join on the joining thread) make and
// read their packed copies in that thread's cache, under a lock, instead of a copy a thread (every thread would
// then read every float32 weight from memory of its own). The starting thread must be in a packed region for the
// SharedPacking's life, and the Joins must end before it does. Packed copies only: lanes do not run under autocast.
class SharedPacking {
public:
    SharedPacking();
    ~SharedPacking();
    SharedPacking(const SharedPacking&) = delete;
    SharedPacking& operator=(const SharedPacking&) = delete;

    class Join {
    public:
        explicit Join(SharedPacking& shared);
        ~Join();
        Join(const Join&) = delete;
        Join& operator=(const Join&) = delete;
    private:
        SharedPacking* previous_;
    };

    struct State;   // the starting thread's cache and its lock (weight_cache.cpp)
private:
    std::unique_ptr<State> state_;
    SharedPacking* previous_;
    friend const blas::PackedWeight* packed_or_counted(const Tensor& w, bool bf16_rounded, bool count_only);
};

// packed() (count_only false) and note_product() (true) in one.
const blas::PackedWeight* packed_or_counted(const Tensor& w, bool bf16_rounded, bool count_only);

// Drop every copy of the kind and free its memory (autocast::clear_cache).
void clear(Kind kind);
// How many parameters this thread holds a copy of, of the kind (tests; PackedWeights::count).
std::size_t count(Kind kind);

}  // namespace ct::weight_cache
