// Ctrl-C during a long C++ call. The call runs with the GIL released, so Python's SIGINT handler
// cannot run until it returns; the core's loops accept a should_stop callback
// (ctransformer/decode/should_stop.hpp), and this one takes the GIL back briefly, at most every
// 50 ms, to run the signal handlers. A KeyboardInterrupt they raise is thrown from the callback as
// py::error_already_set: it leaves the loop (the model untouched) and reaches Python as itself.
// Outside the main thread PyErr_CheckSignals does nothing, so other threads are never stopped.
#pragma once
#include <pybind11/pybind11.h>

#include <chrono>
#include <functional>
#include <memory>

namespace ctpy {

namespace py = pybind11;

inline std::function<bool()> python_should_stop() {
    using clock = std::chrono::steady_clock;
    auto last = std::make_shared<clock::time_point>(clock::now());
    return [last] {
        const auto now = clock::now();
        if (now - *last < std::chrono::milliseconds(50)) return false;
        *last = now;
        py::gil_scoped_acquire gil;
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
        return false;
    };
}

}  // namespace ctpy
