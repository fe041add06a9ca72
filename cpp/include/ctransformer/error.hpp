// Exceptions of the core. Each derives from the std type that pybind11 maps to the matching
// Python exception, so the bindings need no translation code for them:
// ValueError <- std::invalid_argument, IndexError <- std::out_of_range,
// RuntimeError <- std::runtime_error. TypeError has its own translator in the bindings.
#pragma once
#include <stdexcept>
#include <string>

namespace ct {

struct ValueError : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};
struct IndexError : std::out_of_range {
    using std::out_of_range::out_of_range;
};
struct TypeError : std::runtime_error {
    using std::runtime_error::runtime_error;
};
struct RuntimeError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

}  // namespace ct
