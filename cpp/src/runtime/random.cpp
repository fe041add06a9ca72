#include "ctransformer/runtime/random.hpp"

#include <cmath>
#include <sstream>

#include "ctransformer/error.hpp"

namespace ct {

Generator& default_generator() {
    static Generator generator(0);
    return generator;
}

void manual_seed(std::uint64_t seed) { default_generator().seed(seed); }

std::string get_rng_state() {
    std::ostringstream os;
    auto lock = default_generator().lock();
    os << default_generator().engine();
    return os.str();
}

void set_rng_state(const std::string& state) {
    std::istringstream is(state);
    std::mt19937_64 engine;
    is >> engine;
    if (is.fail()) throw ValueError("set_rng_state: state is not a generator state made by get_rng_state()");
    auto lock = default_generator().lock();
    default_generator().engine() = engine;
}

namespace {
thread_local int t_skip_init = 0;   // SkipInit objects alive on this thread
}  // namespace

SkipInit::SkipInit() { ++t_skip_init; }
SkipInit::~SkipInit() { --t_skip_init; }

void uniform_(Tensor& t, float low, float high) {
    if (t_skip_init > 0) return;
    float* p = t.data();
    Generator& g = default_generator();
    auto lock = g.lock();   // one tensor's draws in a row, even with other threads drawing
    for (std::size_t i = 0; i < t.numel(); ++i) p[i] = std::uniform_real_distribution<float>(low, high)(g.engine());
}

void normal_(Tensor& t, float mean, float std) {
    if (t_skip_init > 0) return;
    float* p = t.data();
    Generator& g = default_generator();
    auto lock = g.lock();
    for (std::size_t i = 0; i < t.numel(); ++i) p[i] = std::normal_distribution<float>(mean, std)(g.engine());
}

void xavier_uniform_(Tensor& t) {
    if (t.dim() < 2) throw ValueError("xavier_uniform_: needs a tensor of rank >= 2, got shape " + shape_str(t.shape()));
    // As torch: fan_in = size(1) * receptive field, fan_out = size(0) * receptive field.
    const std::size_t receptive = t.numel() / (t.size(0) * t.size(1));
    const double fan_in = double(t.size(1) * receptive), fan_out = double(t.size(0) * receptive);
    const float a = float(std::sqrt(6.0 / (fan_in + fan_out)));
    uniform_(t, -a, a);
}

}  // namespace ct
