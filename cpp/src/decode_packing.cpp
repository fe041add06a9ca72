#include "decode_packing.hpp"

#include <memory>
#include <unordered_map>

namespace ct::decode_packing {

namespace {

struct Entry {
    std::shared_ptr<Array> storage;  // held, so its address cannot be reused by another tensor meanwhile
    int uses = 0;
    bool packed_yet = false;
    blas::PackedWeight packed;
};

thread_local int t_depth = 0;  // PackedWeights alive on this thread
thread_local std::unordered_map<const Array*, Entry> t_packed;

// Packing a weight costs about as much as 2 products: of many rows (sgemm packs it on each of them anyway)
// or of a few (8000 x 256 projection: ~280 us to pack, ~150 us a product of 5 rows, ~100 us from the packed
// copy). So a weight is packed on its second product of 3 or more rows: a weight used once per call (the
// encoder's) is not packed, and a decoder's, used every step, is from the second step on. (It used to wait
// for the 32nd product of a few rows, when a fresh copy from the system cost ~3 ms in page faults: a lone
// beam 5 call at batch 1 read its weights unpacked for 31 steps, 1.5-2.2x slower a product.)
constexpr int kUsesBeforePacking = 2;

}  // namespace

const blas::PackedWeight* weight(const Tensor& w) {
    if (t_depth == 0 || w.dim() != 2 || !(w.is_leaf() && w.requires_grad()) || !blas::packed_available())
        return nullptr;
    const std::shared_ptr<Array>& storage = w.impl()->storage;
    auto it = t_packed.find(storage.get());  // (an Entry built for every product would copy the shared_ptr)
    if (it == t_packed.end()) it = t_packed.emplace(storage.get(), Entry{storage, 0, false, {}}).first;
    Entry& e = it->second;
    if (e.packed_yet) return &e.packed;
    ++e.uses;
    if (e.uses < kUsesBeforePacking) return nullptr;
    blas::pack_weight(w.data(), int(w.size(0)), int(w.size(1)), int(w.size(1)), e.packed);
    e.packed_yet = true;
    return &e.packed;
}

}  // namespace ct::decode_packing

namespace ct::decode {

PackedWeights::PackedWeights() { ++decode_packing::t_depth; }

std::size_t PackedWeights::count() {
    std::size_t n = 0;
    for (const auto& entry : decode_packing::t_packed) n += entry.second.packed_yet ? 1 : 0;
    return n;
}

PackedWeights::~PackedWeights() {
    if (--decode_packing::t_depth == 0) decode_packing::t_packed.clear();
}

}  // namespace ct::decode
