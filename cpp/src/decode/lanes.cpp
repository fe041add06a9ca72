#include "ctransformer/decode/lanes.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

#include "ctransformer/autocast.hpp"
#include "ctransformer/decode/packed_weights.hpp"
#include "ctransformer/runtime/autograd.hpp"
#include "../kernels/weight_cache.hpp"
#include "../runtime/parallel.hpp"

namespace ct::decode {

bool runs_in_lanes(std::size_t calls, bool lanes) {
    return lanes && calls >= 2 && parallel::threads() >= 2 && !autocast::enabled();
}

namespace {

// The calls in lanes; false, having run none, when the pool has no threads for them (this thread runs a piece).
bool run_in_lanes(std::size_t calls, const std::function<void(std::size_t, const ShouldStop&)>& call,
                  const ShouldStop& should_stop) {
    const std::thread::id caller = std::this_thread::get_id();
    std::atomic<std::size_t> next{0};
    std::atomic<bool> failed{false};
    std::mutex error_mu;
    std::exception_ptr error;
    // The caller's lane asks should_stop; every lane stops once a lane failed (its call threw, or was stopped).
    const ShouldStop lane_stop = [&] {
        if (failed.load(std::memory_order_relaxed)) return true;
        return std::this_thread::get_id() == caller && should_stop && should_stop();
    };
    const std::size_t count = std::min<std::size_t>(calls, std::size_t(parallel::threads()));
    PackedWeights packing;   // this thread's region, which holds the packed copies every lane reads
    weight_cache::SharedPacking shared;
    const bool ran = parallel::each_on_own_thread(count, [&](std::size_t) {
        NoGradGuard no_grad;   // thread-local: a worker's own
        weight_cache::SharedPacking::Join join(shared);
        try {
            for (std::size_t i; !failed.load(std::memory_order_relaxed) && (i = next.fetch_add(1)) < calls;)
                call(i, lane_stop);
        } catch (...) {   // a pool's worker must not throw (it would end the process)
            std::lock_guard<std::mutex> lock(error_mu);
            if (!error) error = std::current_exception();
            failed.store(true);
        }
    });
    if (error) std::rethrow_exception(error);
    return ran;
}

}  // namespace

void run_calls(std::size_t calls, const std::function<void(std::size_t, const ShouldStop&)>& call,
               const ShouldStop& should_stop, bool lanes) {
    if (runs_in_lanes(calls, lanes) && run_in_lanes(calls, call, should_stop)) return;
    // One after another on this thread, each call's operations split over the threads (or inline, when this
    // thread is itself running a pool's piece and the lanes had no threads to take).
    for (std::size_t i = 0; i < calls; ++i) call(i, should_stop);
}

}  // namespace ct::decode
