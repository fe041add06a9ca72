#include "ctransformer/decode/packed_weights.hpp"

#include "../kernels/weight_cache.hpp"

namespace ct::decode {

// The copies live in the thread's weight cache (kernels/weight_cache.hpp); linear() asks it for them.
PackedWeights::PackedWeights() { weight_cache::enter(weight_cache::Kind::Packed); }

PackedWeights::~PackedWeights() { weight_cache::leave(weight_cache::Kind::Packed); }

std::size_t PackedWeights::count() { return weight_cache::count(weight_cache::Kind::Packed); }

}  // namespace ct::decode
