// One seedable generator for the whole library: initialisation and dropout both draw from it,
// so `manual_seed(n)` makes a run reproducible.
#pragma once
#include <cstdint>
#include <mutex>
#include <random>
#include <string>

#include "ctransformer/runtime/tensor.hpp"

namespace ct {

// Thread-safe: each draw holds the generator's mutex, so threads sharing it (two models trained or
// decoded at once) never corrupt its state; which thread gets which draw then depends on timing.
// A loop of draws takes lock() once and draws from engine() (the lock must be held for that).
class Generator {
public:
    explicit Generator(std::uint64_t seed = 0) : engine_(seed) {}
    void seed(std::uint64_t s) { auto l = lock(); engine_.seed(s); }
    float uniform(float low = 0.0f, float high = 1.0f) {
        auto l = lock();
        return std::uniform_real_distribution<float>(low, high)(engine_);
    }
    float normal(float mean = 0.0f, float std = 1.0f) {
        auto l = lock();
        return std::normal_distribution<float>(mean, std)(engine_);
    }
    std::uint64_t next() { auto l = lock(); return engine_(); }
    std::unique_lock<std::mutex> lock() { return std::unique_lock<std::mutex>(mu_); }
    std::mt19937_64& engine() { return engine_; }

private:
    std::mutex mu_;
    std::mt19937_64 engine_;
};

Generator& default_generator();
void manual_seed(std::uint64_t seed);
// The generator's full state as text, and back: checkpoints use it to resume dropout exactly.
std::string get_rng_state();
void set_rng_state(const std::string& state);

// While one lives on this thread, uniform_, normal_ and xavier_uniform_ leave their tensor as it is (a new
// parameter's zeros) and draw nothing from the generator: a model built only to have every parameter loaded next
// (torch.nn.utils.skip_init; from_pretrained) skips drawing what it would throw away, ~10 s for GPT-2's 124 M.
class SkipInit {
public:
    SkipInit();
    ~SkipInit();
    SkipInit(const SkipInit&) = delete;
    SkipInit& operator=(const SkipInit&) = delete;
};

// In-place initialisers used by the modules (torch.nn.init equivalents); nothing while a SkipInit lives.
void uniform_(Tensor& t, float low, float high);
void normal_(Tensor& t, float mean, float std);
// Glorot/Xavier uniform for a (fan_out, fan_in) weight: U(-a, a), a = sqrt(6 / (fan_in + fan_out)).
void xavier_uniform_(Tensor& t);

}  // namespace ct
