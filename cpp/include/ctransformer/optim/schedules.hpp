// Learning-rate formulas of the seeds, as plain functions of the step.
#pragma once
#include <cstdint>

namespace ct::optim {

// The Annotated Transformer's Noam schedule, with step 0 counted as 1,
//   factor * model_size^-0.5 * min(step^-0.5, step * warmup^-1.5).
double rate(std::int64_t step, double model_size, double factor, double warmup);

// rate() as an object, for LambdaLR: evaluated in C++, no Python call per step.
struct NoamLambda {
    double model_size;
    double factor;
    double warmup;
    NoamLambda(double model_size, double factor, double warmup);  // validates
    double operator()(std::int64_t step) const { return rate(step, model_size, factor, warmup); }
};

// nanoGPT's get_lr (train.py): linear warmup learning_rate * (it + 1) / (warmup_iters + 1) while
// it < warmup_iters, min_lr after lr_decay_iters, cosine decay from learning_rate to min_lr between.
double cosine_with_warmup(std::int64_t it, std::int64_t warmup_iters, std::int64_t lr_decay_iters,
                          double learning_rate, double min_lr);

}  // namespace ct::optim
