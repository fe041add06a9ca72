#include "weight_cache.hpp"

#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace ct::weight_cache {

namespace {

struct Entry {
    std::shared_ptr<Array> storage;  // held, so its address cannot be reused by another tensor meanwhile
    // packed: products counted before packing, and the copy once made; [1]: of the values rounded to bf16.
    int packed_uses[2] = {0, 0};
    bool packed_yet[2] = {false, false};
    blas::PackedWeight packed[2];
    // bf16: present (possibly empty: only noted, a training product read the weight and an optimizer may
    // write it) while the bf16 region lasts; else current.
    bool bf16_noted = false;
    std::vector<bf16_t> bf16;

    bool holds_nothing() const {
        return !packed_yet[0] && !packed_yet[1] && packed_uses[0] == 0 && packed_uses[1] == 0 && !bf16_noted;
    }
};

using Entries = std::unordered_map<const Array*, Entry>;
thread_local Entries t_entries;
thread_local int t_depth[2] = {0, 0};  // open regions of each kind on this thread
// The last bf16 region's buffers, for the next region's copies: a fresh 10 MB buffer (the base model's
// embedding) costs ~2,500 page faults, and a loop that opens a region per step (benchmarks/cases.py,
// a user's) would spend 8% of a base training step faulting them in. (The packed copies' floats come from the
// tensors' caching allocator instead: kernels/fp32/packed.hpp.)
thread_local std::vector<std::vector<bf16_t>> t_spare_bf16;

int& depth(Kind kind) { return t_depth[kind == Kind::Bf16]; }

// Packing a weight costs about as much as 2 products: of many rows (sgemm packs it on each of them anyway)
// or of a few (8000 x 256 projection: ~280 us to pack, ~150 us a product of 5 rows, ~100 us from the packed
// copy). So a weight is packed on its second product of kPackedMinRows or more rows: a weight used once per
// call (the encoder's) is not packed, and a decoder's, used every step, is from the second step on.
constexpr int kUsesBeforePacking = 2;

// w's entry in `entries` (this thread's by default), a new one when it has none and `create`, else null.
Entry* entry_of(const Tensor& w, bool create, Entries& entries = t_entries) {
    const std::shared_ptr<Array>& storage = w.impl()->storage;
    auto it = entries.find(storage.get());  // (an Entry built for every product would copy the shared_ptr)
    if (it != entries.end()) return &it->second;
    if (!create) return nullptr;
    Entry entry;
    entry.storage = storage;
    return &entries.emplace(storage.get(), std::move(entry)).first->second;
}

// w's packed copy in `entries` (of its values rounded to bf16: rounded), made on its kUsesBeforePacking-th product;
// null before.
// count_only: a use that does not read the copy (note_product): counted, never packing.
const blas::PackedWeight* packed_in(Entries& entries, const Tensor& w, bool rounded, bool count_only = false) {
    Entry& e = *entry_of(w, true, entries);
    if (e.packed_yet[rounded]) return &e.packed[rounded];
    if (count_only) {
        e.packed_uses[rounded] = std::min(e.packed_uses[rounded] + 1, kUsesBeforePacking - 1);
        return nullptr;
    }
    if (++e.packed_uses[rounded] < kUsesBeforePacking) return nullptr;
    blas::pack_weight(w.data(), int(w.size(0)), int(w.size(1)), int(w.size(1)), e.packed[rounded], rounded);
    e.packed_yet[rounded] = true;
    return &e.packed[rounded];
}

thread_local SharedPacking* t_shared = nullptr;   // the lanes' shared cache this thread uses, if any

bool is_parameter(const Tensor& w) { return w.is_leaf() && w.requires_grad(); }

std::vector<bf16_t> take_buffer(std::size_t n) {
    for (auto it = t_spare_bf16.begin(); it != t_spare_bf16.end(); ++it)
        if (it->size() == n) {
            std::vector<bf16_t> out = std::move(*it);
            t_spare_bf16.erase(it);
            return out;
        }
    return std::vector<bf16_t>(n);
}

// The entry's bf16 copy, to be written whole by the caller.
bf16_t* claim_bf16(Entry& entry, std::size_t n) {
    if (entry.bf16.size() != n) entry.bf16 = take_buffer(n);
    return entry.bf16.data();
}

// Drop the kind's copies; an entry left holding nothing goes. keep_spares: the bf16 buffers stay for the next
// region (freed then).
void drop(Kind kind, bool keep_spares) {
    if (kind == Kind::Bf16) t_spare_bf16.clear();
    for (auto it = t_entries.begin(); it != t_entries.end();) {
        Entry& e = it->second;
        if (kind == Kind::Packed) {
            for (int r = 0; r < 2; ++r) {
                e.packed_uses[r] = 0;
                e.packed_yet[r] = false;
                e.packed[r] = {};
            }
        } else {
            if (keep_spares && !e.bf16.empty()) t_spare_bf16.push_back(std::move(e.bf16));
            e.bf16 = {};
            e.bf16_noted = false;
        }
        it = e.holds_nothing() ? t_entries.erase(it) : std::next(it);
    }
}

}  // namespace

void enter(Kind kind) { ++depth(kind); }

void leave(Kind kind) {
    if (--depth(kind) == 0) drop(kind, true);
}

struct SharedPacking::State {
    Entries* entries;   // the starting thread's
    std::mutex mu;
};

SharedPacking::SharedPacking() : state_(new State{&t_entries, {}}), previous_(t_shared) { t_shared = this; }
SharedPacking::~SharedPacking() { t_shared = previous_; }
SharedPacking::Join::Join(SharedPacking& shared) : previous_(t_shared) { t_shared = &shared; }
SharedPacking::Join::~Join() { t_shared = previous_; }

const blas::PackedWeight* packed_or_counted(const Tensor& w, bool bf16_rounded, bool count_only) {
    if (w.dim() != 2 || !is_parameter(w) || !blas::packed_available()) return nullptr;
    if (t_shared) {   // a lane: the starting thread's cache (in a packed region), its entries made under the lock
        // An entry, once packed, is not changed or moved (the map's nodes stay put) until the region ends,
        // after the lanes: the pointer is read outside the lock.
        std::lock_guard<std::mutex> lock(t_shared->state_->mu);
        return packed_in(*t_shared->state_->entries, w, bf16_rounded, count_only);
    }
    if (depth(Kind::Packed) == 0) return nullptr;
    return packed_in(t_entries, w, bf16_rounded, count_only);
}

const blas::PackedWeight* packed(const Tensor& w, bool bf16_rounded) { return packed_or_counted(w, bf16_rounded, false); }

void note_product(const Tensor& w, bool bf16_rounded) { packed_or_counted(w, bf16_rounded, true); }

Bf16Operand bf16_operand(const Tensor& w, int ld, bool trans, bool round_now) {
    const bool open = depth(Kind::Bf16) > 0;
    Entry* e = is_parameter(w) ? entry_of(w, open) : nullptr;
    if (!e || !(e->bf16_noted || open)) return Bf16Operand::fp32(w.data(), ld, trans);
    e->bf16_noted = true;
    if (e->bf16.empty()) {
        if (!round_now) return Bf16Operand::fp32(w.data(), ld, trans);  // noted: the optimizer writes a copy
        round_to_bf16(w.data(), claim_bf16(*e, w.numel()), w.numel());
    }
    return Bf16Operand::bf16(e->bf16.data(), ld, trans);
}

bf16_t* bf16_to_write(const Tensor& w) {
    Entry* e = entry_of(w, false);
    return e && e->bf16_noted ? claim_bf16(*e, w.numel()) : nullptr;
}

void clear(Kind kind) { drop(kind, false); }

std::size_t count(Kind kind) {
    std::size_t n = 0;
    for (const auto& [key, e] : t_entries)
        n += kind == Kind::Packed ? std::size_t(e.packed_yet[0]) + std::size_t(e.packed_yet[1]) : !e.bf16.empty();
    return n;
}

}  // namespace ct::weight_cache
