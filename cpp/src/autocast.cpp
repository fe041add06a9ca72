#include "ctransformer/autocast.hpp"

#include <mutex>
#include <unordered_map>
#include <vector>

namespace ct::autocast {

namespace {

thread_local bool t_enabled = false;
thread_local int t_depth = 0;  // nested regions that turned autocast on

struct Cached {
    std::shared_ptr<Array> storage;  // held, so its address cannot be reused by another tensor while cached
    std::vector<bf16_t> bits;
};

std::mutex g_mutex;
std::unordered_map<const Array*, Cached> g_cache;
// The last region's buffers, for the next region's copies: a fresh 10 MB buffer (the base model's
// embedding) costs ~2,500 page faults, and a loop that opens a region per step (benchmarks/cases.py,
// a user's) spent 8% of a base training step faulting them in.
std::vector<std::vector<bf16_t>> g_spare;

std::vector<bf16_t> take_buffer(std::size_t n) {
    for (auto it = g_spare.begin(); it != g_spare.end(); ++it)
        if (it->size() == n) {
            std::vector<bf16_t> out = std::move(*it);
            g_spare.erase(it);
            return out;
        }
    return std::vector<bf16_t>(n);
}

// A region ends: its copies may go stale, their memory is kept for the next region (and freed then).
void retire_cache() {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_spare.clear();
    for (auto& entry : g_cache) g_spare.push_back(std::move(entry.second.bits));
    g_cache.clear();
}

}  // namespace

bool enabled() { return t_enabled; }

Guard::Guard(bool on) : previous_(t_enabled) {
    t_enabled = on;
    if (on) ++t_depth;
}

Guard::~Guard() {
    if (t_enabled && --t_depth == 0) retire_cache();
    t_enabled = previous_;
}

Bf16Operand operand(const Tensor& w, int ld, bool trans) {
    const bool parameter = w.is_leaf() && w.requires_grad();
    if (!parameter) return Bf16Operand::fp32(w.data(), ld, trans);
    const std::shared_ptr<Array>& storage = w.impl()->storage;
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_cache.find(storage.get());
    if (it == g_cache.end()) {
        if (!t_enabled) return Bf16Operand::fp32(w.data(), ld, trans);
        Cached entry{storage, take_buffer(w.numel())};
        round_to_bf16(w.data(), entry.bits.data(), w.numel());
        it = g_cache.emplace(storage.get(), std::move(entry)).first;
    }
    return Bf16Operand::bf16(it->second.bits.data(), ld, trans);
}

bf16_t* cached_copy(const Tensor& w) {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_cache.find(w.impl()->storage.get());
    return it == g_cache.end() ? nullptr : it->second.bits.data();
}

void clear_cache() {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_cache.clear();
    g_spare.clear();
}

std::size_t cached_count() {
    std::lock_guard<std::mutex> lock(g_mutex);
    return g_cache.size();
}

}  // namespace ct::autocast
