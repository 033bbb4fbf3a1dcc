#pragma once
// OLMo's learning-rate schedulers (allenai/OLMo, olmo/optim.py: CosWithWarmup,
// LinearWithWarmup, InvSqrtWithWarmup, ConstantScheduler, and ConstantWithWarmup from
// later OLMo versions). `t` is the trainer's step counter, which OLMo increments before
// the step, so the first update sees t = 1; with scheduler.units = tokens, t is the number
// of tokens seen including the current batch.
#include "siamese/config/config.h"

namespace siamese::train {

// The learning rate at `t` for peak `initial_lr`; `t_max_default` is the run length in
// the scheduler's units, used when scheduler.t_max is unset.
double learning_rate(const config::SchedulerConfig& cfg, double initial_lr, double t, double t_max_default);

}  // namespace siamese::train
