// Exceptions of the core. Each derives from the std type that pybind11 maps to the matching
// Python exception, so the bindings need no translation code for them:
// ValueError <- std::invalid_argument, IndexError <- std::out_of_range,
// RuntimeError <- std::runtime_error, MemoryError <- std::bad_alloc (its what() is the message).
// TypeError has its own translator in the bindings.
#pragma once
#include <new>
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
// An allocation that cannot succeed; unlike a bare std::bad_alloc the message says what was being
// allocated (shape, bytes), and code that catches std::bad_alloc still catches it.
struct MemoryError : std::bad_alloc {
    explicit MemoryError(std::string message) : message_(std::move(message)) {}
    const char* what() const noexcept override { return message_.c_str(); }

private:
    std::string message_;
};

}  // namespace ct
