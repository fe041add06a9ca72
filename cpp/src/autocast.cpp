#include "ctransformer/autocast.hpp"

#include <unordered_map>
#include <vector>

namespace ct::autocast {

namespace {

thread_local bool t_enabled = false;
thread_local int t_depth = 0;  // nested regions that turned autocast on

struct Cached {
    std::shared_ptr<Array> storage;  // held, so its address cannot be reused by another tensor while cached
    // Empty while only noted (a training product read the weight; an optimizer may write it), else current.
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
    for (auto& entry : t_cache)
        if (!entry.second.bits.empty()) t_spare.push_back(std::move(entry.second.bits));
    t_cache.clear();
}

// w's entry, a new one (no copy yet) when it has none and `create`, else null.
Cached* entry_of(const Tensor& w, bool create) {
    const std::shared_ptr<Array>& storage = w.impl()->storage;
    auto it = t_cache.find(storage.get());
    if (it != t_cache.end()) return &it->second;
    if (!create) return nullptr;
    return &t_cache.emplace(storage.get(), Cached{storage, {}}).first->second;
}

// The entry's copy, to be written whole by the caller.
bf16_t* claim(Cached& entry, std::size_t n) {
    if (entry.bits.size() != n) entry.bits = take_buffer(n);
    return entry.bits.data();
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

Bf16Operand operand(const Tensor& w, int ld, bool trans, bool round_now) {
    const bool parameter = w.is_leaf() && w.requires_grad();
    Cached* entry = parameter ? entry_of(w, t_enabled) : nullptr;
    if (!entry) return Bf16Operand::fp32(w.data(), ld, trans);
    if (entry->bits.empty()) {
        if (!round_now) return Bf16Operand::fp32(w.data(), ld, trans);  // the entry asks the optimizer for a copy
        round_to_bf16(w.data(), claim(*entry, w.numel()), w.numel());
    }
    return Bf16Operand::bf16(entry->bits.data(), ld, trans);
}

bf16_t* copy_to_write(const Tensor& w) {
    Cached* entry = entry_of(w, false);
    return entry ? claim(*entry, w.numel()) : nullptr;
}

void clear_cache() {
    t_cache.clear();
    t_spare.clear();
}

std::size_t cached_count() {
    std::size_t n = 0;
    for (const auto& entry : t_cache) n += !entry.second.bits.empty();
    return n;
}

}  // namespace ct::autocast
