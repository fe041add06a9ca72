#include "ctransformer/autocast.hpp"

#include "kernels/weight_cache.hpp"

namespace ct::autocast {

namespace {

thread_local bool t_enabled = false;

}  // namespace

bool enabled() { return t_enabled; }

// A region that turns autocast on opens the thread's bf16 copies (kernels/weight_cache.hpp) until it ends.
Guard::Guard(bool on) : previous_(t_enabled) {
    t_enabled = on;
    if (on) weight_cache::enter(weight_cache::Kind::Bf16);
}

Guard::~Guard() {
    if (t_enabled) weight_cache::leave(weight_cache::Kind::Bf16);
    t_enabled = previous_;
}

void clear_cache() { weight_cache::clear(weight_cache::Kind::Bf16); }

std::size_t cached_count() { return weight_cache::count(weight_cache::Kind::Bf16); }

}  // namespace ct::autocast
