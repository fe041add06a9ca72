#include "ctransformer/autocast.hpp"

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

// Per thread, as the flag (and as torch's cast cache): a region ending on one thread cannot free copies
// that another thread's products are reading.
thread_local std::unordered_map<const Array*, Cached> t_cache;
// The last region's buffers, for the next region's copies: a fresh 10 MB buffer (the base model's
// embedding) costs ~2,500 page faults, and a loop that opens a region per step (benchmarks/cases.py,
// a user's) spent 8% of a base training step faulting them in.
thread_local std::vector<std::vector<bf16_t>> t_spare;

std::vector<bf16_t> take_buffer(std::size_t n) {
    for (auto it = t_spare.begin(); it != t_spare.end(); ++it)
        if (it->size() == n) {
            std::vector<bf16_t> out = std::move(*it);
            t_spare.erase(it);
            return out;
        }
    return std::vector<bf16_t>(n);
}

// A region ends: its copies may go stale, their memory is kept for the next region (and freed then).
void retire_cache() {
    t_spare.clear();
    for (auto& entry : t_cache) t_spare.push_back(std::move(entry.second.bits));
    t_cache.clear();
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
    auto it = t_cache.find(storage.get());
    if (it == t_cache.end()) {
        if (!t_enabled) return Bf16Operand::fp32(w.data(), ld, trans);
        Cached entry{storage, take_buffer(w.numel())};
        round_to_bf16(w.data(), entry.bits.data(), w.numel());
        it = t_cache.emplace(storage.get(), std::move(entry)).first;
    }
    return Bf16Operand::bf16(it->second.bits.data(), ld, trans);
}

bf16_t* cached_copy(const Tensor& w) {
    auto it = t_cache.find(w.impl()->storage.get());
    return it == t_cache.end() ? nullptr : it->second.bits.data();
}

void clear_cache() {
    t_cache.clear();
    t_spare.clear();
}

std::size_t cached_count() {
    return t_cache.size();
}

}  // namespace ct::autocast
