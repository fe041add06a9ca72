#include "decode_packing.hpp"

#include <memory>
#include <unordered_map>

namespace ct::decode_packing {

namespace {

struct Entry {
    std::shared_ptr<Array> storage;  // held, so its address cannot be reused by another tensor meanwhile
    bool packed_yet = false;
    blas::PackedWeight packed;
};

thread_local int t_depth = 0;  // PackedWeights alive on this thread
thread_local std::unordered_map<const Array*, Entry> t_packed;

}  // namespace

const blas::PackedWeight* weight(const Tensor& w) {
    if (t_depth == 0 || w.dim() != 2 || !(w.is_leaf() && w.requires_grad()) || !blas::packed_available())
        return nullptr;
    const std::shared_ptr<Array>& storage = w.impl()->storage;
    // Packed on its second product, not its first: a weight used once per call (the encoder's, the
    // cross-attention's keys and values) would pay a packing for nothing (decoding at batch 1 lost a third).
    auto it = t_packed.find(storage.get());
    if (it == t_packed.end()) {
        t_packed.emplace(storage.get(), Entry{storage, false, {}});
        return nullptr;
    }
    Entry& e = it->second;
    if (!e.packed_yet) {
        blas::pack_weight(w.data(), int(w.size(0)), int(w.size(1)), int(w.size(1)), e.packed);
        e.packed_yet = true;
    }
    return &e.packed;
}

}  // namespace ct::decode_packing

namespace ct::decode {

PackedWeights::PackedWeights() { ++decode_packing::t_depth; }

PackedWeights::~PackedWeights() {
    if (--decode_packing::t_depth == 0) decode_packing::t_packed.clear();
}

}  // namespace ct::decode
