// Several decoding calls at once, one a thread ("lanes"): the Translator's batches of sentences.
//
// Each call split product by product over the threads leaves one thread waiting through the serial work between
// the products (layer norms, attention, the word choice) and at the end of each product: at batch 32 on a small
// model (d_model 256, 2 threads) a quarter of the second thread's time. Two processes of one thread, each with half
// the batches, translated 24-43% more tokens a second than one process of two threads (float32 and int8, Multi30k's
// test2016, AMD EPYC Zen 3, 2026-11-30). In lanes each thread takes the next call and runs it whole, its operations
// inline, and no thread waits for another until the calls run out. The serving engine's lanes (serve/engine.cpp)
// do the same for a continuous batch.
//
// A call gives the same result in a lane: its products have the same rows, and every kernel sums each output in the
// same order however its columns or rows are split (float32's packed kernel, int8's exact sums; the BLAS's
// sgemm on a split product and on the whole one are the BLAS's own affair, which the tests leave off the knife edge).
#pragma once
#include <cstddef>
#include <functional>

#include "ctransformer/decode/should_stop.hpp"

namespace ct::decode {

// call(i, should_stop) for every i in [0, calls).
//
// In lanes when `lanes` is set, there are 2 calls or more, ct::get_num_threads() is 2 or more and the calling
// thread is not in an autocast region (its bf16 copies and the region itself are the calling thread's): each of
// min(threads, calls) threads, the caller included, takes the next call until none is left, under a NoGradGuard.
// The float32 weights are packed once, in the calling thread's region, and every lane reads the same copies
// (kernels/weight_cache.hpp, SharedPacking). Otherwise the calls run one after another on this thread, their
// operations split over the threads.
//
// should_stop is called on the calling thread only (the bindings' callback runs Python's signal handlers, which only
// the main thread may); the call passes on the ShouldStop it is given. Once should_stop says stop, or a call throws,
// the calls running stop at their next step, no call starts, and the first error (ct::Cancelled for a stop) is
// rethrown here.
void run_calls(std::size_t calls, const std::function<void(std::size_t, const ShouldStop&)>& call,
               const ShouldStop& should_stop = {}, bool lanes = true);

// Whether run_calls would run these calls in lanes (tests, and a caller's choice of batch order).
bool runs_in_lanes(std::size_t calls, bool lanes = true);

}  // namespace ct::decode
