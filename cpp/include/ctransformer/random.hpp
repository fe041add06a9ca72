// One seedable generator for the whole library: initialisation and dropout both draw from it,
// so `manual_seed(n)` makes a run reproducible.
#pragma once
#include <cstdint>
#include <random>
#include <string>

#include "ctransformer/tensor.hpp"

namespace ct {

class Generator {
public:
    explicit Generator(std::uint64_t seed = 0) : engine_(seed) {}
    void seed(std::uint64_t s) { engine_.seed(s); }
    float uniform(float low = 0.0f, float high = 1.0f) {
        return std::uniform_real_distribution<float>(low, high)(engine_);
    }
    float normal(float mean = 0.0f, float std = 1.0f) { return std::normal_distribution<float>(mean, std)(engine_); }
    std::uint64_t next() { return engine_(); }
    std::mt19937_64& engine() { return engine_; }

private:
    std::mt19937_64 engine_;
};

Generator& default_generator();
void manual_seed(std::uint64_t seed);
// The generator's full state as text, and back: checkpoints use it to resume dropout exactly.
std::string get_rng_state();
void set_rng_state(const std::string& state);

// In-place initialisers used by the modules (torch.nn.init equivalents).
void uniform_(Tensor& t, float low, float high);
void normal_(Tensor& t, float mean, float std);
// Glorot/Xavier uniform for a (fan_out, fan_in) weight: U(-a, a), a = sqrt(6 / (fan_in + fan_out)).
void xavier_uniform_(Tensor& t);

}  // namespace ct
