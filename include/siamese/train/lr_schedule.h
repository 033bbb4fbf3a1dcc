#pragma once
// OLMo's learning-rate schedulers (allenai/OLMo, olmo/optim.py: CosWithWarmup,
// LinearWithWarmup, InvSqrtWithWarmup, ConstantScheduler, and ConstantWithWarmup from
// later OLMo versions), and OLMo-core's WSD (olmo_core/optim/scheduler.py): linear warmup,
// the peak, and a decay over the last t_decay (or round(decay_fraction * t_max), Python's
// half-to-even rounding) to alpha_f of the peak, linear as OLMo-core's or of decay_shape. A
// branch of a stable run decays from the step it starts at (`siamese train --decay-from`). `t` is the
// trainer's step counter, which OLMo increments before the step, so the first update sees t = 1; with
// scheduler.units = tokens, t is the number of tokens seen including the current batch.
#include <string>

#include "siamese/config/config.h"

namespace siamese::train {

// A run's length: max_duration in steps, or in tokens rounded up to whole global batches
// (OLMo), or in epochs of `steps_per_epoch` (only read for those); and the same length in the
// scheduler's units, the `t_max_default` below.
struct RunLength {
  int64_t steps = 0;
  double schedule_max = 0;
  bool token_units = false;  // scheduler.units tokens
};
RunLength run_length(const config::TrainConfig& cfg, int64_t steps_per_epoch);

// The learning rate at `t` for peak `initial_lr`; `t_max_default` is the run length in
// the scheduler's units, used when scheduler.t_max is unset.
double learning_rate(const config::SchedulerConfig& cfg, double initial_lr, double t, double t_max_default);

// Why a run that ends at `t_end` (scheduler units) never trains at the peak `initial_lr`, or
// empty: one that ends inside its warmup compares learning rates it never reaches.
std::string short_of_peak(const config::SchedulerConfig& cfg, double initial_lr, double t_end);

// WSD's decay length for a schedule of `t_max`.
double wsd_decay_length(const config::SchedulerConfig& cfg, double t_max);

}  // namespace siamese::train
