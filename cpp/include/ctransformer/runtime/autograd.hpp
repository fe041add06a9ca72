// Reverse-mode autograd: a dynamic graph of Nodes, built as ops run (micrograd / PyTorch style).
//
// Each op that produces a tensor needing a gradient attaches a Node to it. The Node keeps the op's
// inputs (and whatever it saved from the forward pass) and knows how to turn dL/d(output) into
// dL/d(input) for each input. Tensor::backward() orders the nodes with an iterative depth-first
// search, runs them from the output back, accumulates leaf gradients into `.grad` (adding to what
// is there, like PyTorch, until zero_grad) and then releases the graph.
#pragma once
#include <memory>
#include <vector>

#include "ctransformer/runtime/tensor.hpp"

namespace ct {

struct Node {
    std::vector<Tensor> inputs;   // the op's tensor inputs, in a fixed order
    Array pending_grad;           // dL/d(output), summed over every use of the output
    bool has_pending = false;
    bool released = false;

    // Frees the chain of nodes only this one keeps alive without recursion, so dropping a long
    // graph (thousands of ops never backwarded) cannot overflow the stack.
    virtual ~Node();
    virtual const char* name() const = 0;
    // Add dL/d(inputs[i]) into grad_slot(inputs[i]) for each input that needs a gradient.
    virtual void backward(const Array& grad_out) = 0;
    // Drop inputs and saved tensors so their memory goes back as soon as backward is done.
    virtual void release_saved() {}
    void release();
};

// The buffer a node adds an input's gradient into, zero-filled on first use;
// nullptr when that input needs no gradient (then the node skips computing it).
Array* grad_slot(const Tensor& input);

// The same buffer without the zero-fill: on the first contribution to an input's gradient the
// buffer is fresh (uninitialised) and `accumulate` is false, so the node must WRITE every element
// (a gemm with beta = 0, `d[i] = v`); afterwards `accumulate` is true and it must add. Saves a
// pass over memory per gradient. Ask for an input's buffer only when about to fill it: for an
// op whose two inputs are one tensor (x * x), the second request then sees the first's values.
struct GradBuffer {
    float* data = nullptr;    // null: the input needs no gradient
    bool accumulate = false;  // false: uninitialised, write every element
    explicit operator bool() const { return data != nullptr; }
    float beta() const { return accumulate ? 1.0f : 0.0f; }  // for gemm
};
GradBuffer grad_buffer(const Tensor& input);

// Whether new ops record a graph (false inside a NoGradGuard).
bool grad_enabled();
void set_grad_enabled(bool enabled);

class NoGradGuard {
public:
    NoGradGuard();
    ~NoGradGuard();
    NoGradGuard(const NoGradGuard&) = delete;
    NoGradGuard& operator=(const NoGradGuard&) = delete;
private:
    bool previous_;
};

// True when grad mode is on and any of the inputs requires a gradient.
bool needs_grad(std::initializer_list<const Tensor*> inputs);

// Make `out` the output of `node`, whose inputs are `inputs` (null entries are skipped).
void attach(Tensor& out, std::shared_ptr<Node> node, std::initializer_list<const Tensor*> inputs);

// The engine behind Tensor::backward.
void run_backward(const Tensor& root, const Array& seed);

// Hooks into the engine, as PyTorch's Tensor.register_post_accumulate_grad_hook and the engine's
// queue_callback (what DistributedDataParallel is built on). A post-accumulate hook runs once per
// backward pass that reaches the leaf, right after the node that adds the pass's last contribution
// to its .grad, in the thread running backward; leaves are taken in a fixed order (the graph's
// topological order, then each node's inputs in order), so every process of a data-parallel job
// sees the same sequence. End callbacks run after every backward pass (completed = false when the
// pass threw). Both run under the engine's lock: they must not start another backward or
// (un)register hooks. Registration returns an id for removal.
std::uint64_t register_post_accumulate_grad_hook(const Tensor& leaf, std::function<void(TensorImpl&)> hook);
void remove_post_accumulate_grad_hook(const Tensor& leaf, std::uint64_t id);
std::uint64_t add_backward_end_callback(std::function<void(bool completed)> callback);
void remove_backward_end_callback(std::uint64_t id);

}  // namespace ct
