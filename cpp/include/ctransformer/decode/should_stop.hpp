// Cancelling a long decoding loop. greedy_decode, beam_search and the GPT's generate call an
// optional `should_stop` between steps; when it returns true the loop ends with ct::Cancelled and
// the model is untouched (the caches are the loop's own). The core knows nothing of Python: the
// bindings pass a callback that briefly takes the GIL to run Python's signal handlers, and throws
// the KeyboardInterrupt itself (any exception from the callback leaves the loop the same way).
#pragma once
#include <functional>
#include <string>

#include "ctransformer/error.hpp"

namespace ct::decode {

using ShouldStop = std::function<bool()>;

struct Cancelled : RuntimeError {
    using RuntimeError::RuntimeError;
};

inline void check_should_stop(const ShouldStop& should_stop, const char* fn) {
    if (should_stop && should_stop()) throw Cancelled(std::string(fn) + ": stopped by its should_stop callback");
}

}  // namespace ct::decode
