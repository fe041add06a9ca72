// Adam's and AdamW's parameter update over a range of elements (optim/adam.cpp), per level (tables.hpp).
#pragma once
#include <cstddef>

#include "tables.hpp"

namespace ct::kernels {

// One step's constants, float32 as torch's CPU kernels hold them (computed in double by optim/adam.cpp).
struct AdamCoefficients {
    float decay;          // AdamW: p.mul_(1 - lr * wd)
    float wd;             // Adam: grad.add(p, alpha=wd)
    float w1;             // m.lerp_(grad, 1 - beta1): w1 = 1 - beta1
    float b2;             // v.mul_(beta2).addcmul_(g, g, 1 - beta2): b2 = beta2
    float one_minus_b2;   // 1 - beta2
    float bc2s;           // sqrt(1 - beta2^step)
    float eps;
    float neg_step_size;  // p.addcdiv_(m, denom, value=-step_size), step_size = lr / (1 - beta1^step)
    bool l2;              // Adam's weight decay (into the gradient)
    bool decay_p;         // AdamW's weight decay (onto the parameter)
};

struct AdamLoops {
    // Over n elements, rounded as torch's CPU kernels round it (fma = fused multiply-add):
    //   p = p decay                                  (if decay_p)
    //   g = fma(p, wd, grad)                          (if l2, else grad)
    //   m = lerp(m, g, w1): fma(w1, g - m, m) for w1 < 0.5, else fma(-(g - m), 1 - w1, g)
    //   v = fma(one_minus_b2 g, g, v b2)
    //   p = p + (neg_step_size m) / (sqrt(v) / bc2s + eps)
    void (*update)(float* p, const float* grad, float* m, float* v, std::size_t n, const AdamCoefficients& k);
};

CT_LOOP_TABLES(AdamLoops, adam_loops)

}  // namespace ct::kernels
