#include "ctransformer/runtime/autograd.hpp"

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "ctransformer/error.hpp"

namespace ct {

namespace {
thread_local bool g_grad_enabled = true;
}

bool grad_enabled() { return g_grad_enabled; }
void set_grad_enabled(bool enabled) { g_grad_enabled = enabled; }
NoGradGuard::NoGradGuard() : previous_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = previous_; }

namespace {

// Move out of `node` the grad_fn of every input whose tensor and node nobody else holds,
// and drop the inputs: what was a recursive chain of destructors becomes a flat list.
void steal_unique_inputs(Node& node, std::vector<std::shared_ptr<Node>>& out) {
    // One input at a time, so a tensor used twice (x * x) is unique by the time its last use goes.
    while (!node.inputs.empty()) {
        Tensor t = std::move(node.inputs.back());
        node.inputs.pop_back();
        const std::shared_ptr<TensorImpl>& impl = t.impl();
        if (impl && impl.use_count() == 1 && impl->grad_fn && impl->grad_fn.use_count() == 1)
            out.push_back(std::move(impl->grad_fn));
    }
}

}  // namespace

Node::~Node() {
    std::vector<std::shared_ptr<Node>> pending;
    steal_unique_inputs(*this, pending);
    while (!pending.empty()) {
        std::shared_ptr<Node> node = std::move(pending.back());
        pending.pop_back();
        steal_unique_inputs(*node, pending);  // `node` dies here with no inputs left: no recursion
    }
}

void Node::release() {
    release_saved();
    inputs.clear();
    pending_grad = Array();
    has_pending = false;
    released = true;
}

Array* grad_slot(const Tensor& input) {
    if (!input.requires_grad()) return nullptr;
    const auto& impl = input.impl();
    if (impl->grad_fn) {  // an intermediate result: its gradient waits in its node
        Node& node = *impl->grad_fn;
        if (!node.has_pending) {
            node.pending_grad = Array::from_shape(input.shape());
            node.pending_grad.fill(0.0f);
            node.has_pending = true;
        }
        return &node.pending_grad;
    }
    if (!impl->grad) {  // a leaf: its gradient accumulates in .grad
        impl->grad = Tensor::zeros(input.shape()).impl();
    }
    return impl->grad->storage.get();
}

GradBuffer grad_buffer(const Tensor& input) {
    if (!input.requires_grad()) return {};
    const auto& impl = input.impl();
    if (impl->grad_fn) {
        Node& node = *impl->grad_fn;
        if (!node.has_pending) {
            node.pending_grad = Array::from_shape(input.array().shape());
            node.has_pending = true;
            return {node.pending_grad.data(), false};
        }
        return {node.pending_grad.data(), true};
    }
    if (!impl->grad) {
        impl->grad = Tensor(Array::from_shape(input.array().shape())).impl();
        return {impl->grad->storage->data(), false};
    }
    return {impl->grad->storage->data(), true};
}

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
    if (!g_grad_enabled) return false;
    for (const Tensor* t : inputs)
        if (t && t->requires_grad()) return true;
    return false;
}

void attach(Tensor& out, std::shared_ptr<Node> node, std::initializer_list<const Tensor*> inputs) {
    for (const Tensor* t : inputs)
        if (t) node->inputs.push_back(*t);
    out.impl()->requires_grad = true;
    out.impl()->grad_fn = std::move(node);
}

namespace {

void check_not_released(const Node& node) {
    if (node.released)
        throw RuntimeError(std::string("backward: trying to backward through the graph a second time "
                                       "(the graph of ") + node.name() +
                           " was freed by an earlier backward); recompute the forward pass first");
}

// Nodes reachable from `root`, each after every node that consumes its output. The list owns
// them: releasing a node drops its inputs, which may be the last other owner of a later node.
std::vector<std::shared_ptr<Node>> topological_order(const std::shared_ptr<Node>& root) {
    std::vector<std::shared_ptr<Node>> post_order;
    std::unordered_set<Node*> seen{root.get()};
    std::vector<std::pair<std::shared_ptr<Node>, std::size_t>> stack{{root, 0}};
    while (!stack.empty()) {
        auto& [node, next_input] = stack.back();
        check_not_released(*node);
        if (next_input < node->inputs.size()) {
            std::shared_ptr<Node> child = node->inputs[next_input++].grad_fn();
            if (child && seen.insert(child.get()).second) stack.emplace_back(std::move(child), 0);
        } else {
            post_order.push_back(node);
            stack.pop_back();
        }
    }
    return {post_order.rbegin(), post_order.rend()};
}

}  // namespace

namespace {

// One backward pass at a time, library-wide. Two threads may share leaves (one model's
// parameters): the hot ops write a leaf's gradient through a raw pointer (grad_buffer: the first
// contribution writes, later ones add), so concurrent passes would lose or double-count updates.
// Forwards still run concurrently; backward passes queue here (the kernels share one thread
// pool that runs one task at a time anyway). A pass's arithmetic does not depend on the others.
std::mutex& backward_mutex() {
    static std::mutex mu;
    return mu;
}

std::uint64_t g_next_hook_id = 1;               // guarded by backward_mutex()
std::size_t g_hooked_leaves = 0;                // leaves with at least one post-accumulate hook
std::vector<std::pair<std::uint64_t, std::function<void(bool)>>>& end_callbacks() {
    static std::vector<std::pair<std::uint64_t, std::function<void(bool)>>> callbacks;
    return callbacks;
}

// For each node of `order`, the hooked leaves whose gradient is complete once it has run: those
// it is the last node to feed. Deterministic: nodes in order, then each node's inputs in order.
// Owned, not raw: releasing a node may drop the last other reference to a leaf.
std::vector<std::vector<std::shared_ptr<TensorImpl>>> leaves_done_after(const std::vector<std::shared_ptr<Node>>& order) {
    std::vector<std::vector<std::shared_ptr<TensorImpl>>> done(order.size());
    if (g_hooked_leaves == 0) return done;
    std::unordered_map<TensorImpl*, std::size_t> last;
    for (std::size_t i = 0; i < order.size(); ++i)
        for (const Tensor& input : order[i]->inputs) {
            TensorImpl* impl = input.impl().get();
            if (impl && impl->requires_grad && !impl->grad_fn && !impl->post_accumulate_grad_hooks.empty())
                last[impl] = i;
        }
    for (std::size_t i = 0; i < order.size() && !last.empty(); ++i)
        for (const Tensor& input : order[i]->inputs) {
            auto it = last.find(input.impl().get());
            if (it != last.end() && it->second == i) {
                done[i].push_back(input.impl());
                last.erase(it);
            }
        }
    return done;
}

void run_end_callbacks(bool completed) {
    for (auto& [id, callback] : end_callbacks()) callback(completed);
}

}  // namespace

std::uint64_t register_post_accumulate_grad_hook(const Tensor& leaf, std::function<void(TensorImpl&)> hook) {
    if (!leaf.is_leaf() || !leaf.requires_grad())
        throw RuntimeError("register_post_accumulate_grad_hook: only a leaf tensor that requires grad (a parameter) "
                           "accumulates a gradient");
    std::lock_guard<std::mutex> lock(backward_mutex());
    auto& hooks = leaf.impl()->post_accumulate_grad_hooks;
    if (hooks.empty()) ++g_hooked_leaves;
    hooks.emplace_back(g_next_hook_id, std::move(hook));
    return g_next_hook_id++;
}

void remove_post_accumulate_grad_hook(const Tensor& leaf, std::uint64_t id) {
    std::lock_guard<std::mutex> lock(backward_mutex());
    auto& hooks = leaf.impl()->post_accumulate_grad_hooks;
    const std::size_t before = hooks.size();
    for (auto it = hooks.begin(); it != hooks.end(); ++it)
        if (it->first == id) {
            hooks.erase(it);
            break;
        }
    if (before > 0 && hooks.empty()) --g_hooked_leaves;
}

std::uint64_t add_backward_end_callback(std::function<void(bool)> callback) {
    std::lock_guard<std::mutex> lock(backward_mutex());
    end_callbacks().emplace_back(g_next_hook_id, std::move(callback));
    return g_next_hook_id++;
}

void remove_backward_end_callback(std::uint64_t id) {
    std::lock_guard<std::mutex> lock(backward_mutex());
    auto& callbacks = end_callbacks();
    for (auto it = callbacks.begin(); it != callbacks.end(); ++it)
        if (it->first == id) {
            callbacks.erase(it);
            return;
        }
}

void run_backward(const Tensor& root, const Array& seed) {
    std::lock_guard<std::mutex> lock(backward_mutex());
    if (!root.requires_grad())
        throw RuntimeError("backward: the tensor does not require grad and has no grad_fn "
                           "(create its inputs with requires_grad=True, outside no_grad)");
    if (root.is_leaf()) {
        Array* slot = grad_slot(root);
        *slot += seed;
        for (auto& [id, hook] : root.impl()->post_accumulate_grad_hooks) hook(*root.impl());
        run_end_callbacks(true);
        return;
    }
    const std::shared_ptr<Node>& root_node = root.grad_fn();
    std::vector<std::shared_ptr<Node>> order = topological_order(root_node);
    const std::vector<std::vector<std::shared_ptr<TensorImpl>>> done = leaves_done_after(order);
    root_node->pending_grad = seed;
    root_node->has_pending = true;
    try {
        for (std::size_t i = 0; i < order.size(); ++i) {
            Node& node = *order[i];
            if (node.has_pending) node.backward(node.pending_grad);
            node.release();
            for (const auto& leaf : done[i])
                for (auto& [id, hook] : leaf->post_accumulate_grad_hooks) hook(*leaf);
        }
    } catch (...) {
        for (const auto& node : order) node->release();
        run_end_callbacks(false);
        throw;
    }
    run_end_callbacks(true);
}

}  // namespace ct
