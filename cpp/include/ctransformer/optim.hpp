// The training machinery: optimizers, learning-rate schedules and gradient clipping.
#pragma once
#include "ctransformer/optim/adam.hpp"
#include "ctransformer/optim/clip_grad.hpp"
#include "ctransformer/optim/lr_scheduler.hpp"
#include "ctransformer/optim/optimizer.hpp"
#include "ctransformer/optim/scheduled_optim.hpp"
#include "ctransformer/optim/schedules.hpp"
